# Sourced by scripts/interop.sh and scripts/interop-upstream.sh: the Python the venvs are made
# with (PYTHON, PY_VERSION; INTEROP_PYTHON to choose) and `ensure_venv DIR REQUIREMENTS IMPORTS`,
# which makes (or reuses) a venv with those requirements. Expects `log` and a scratch dir $WORK.

pick_python() {
    local candidate
    for candidate in ${INTEROP_PYTHON:-} python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    log "no Python >= 3.10 found (tried ${INTEROP_PYTHON:-} python3.11 python3); set INTEROP_PYTHON"
    return 1
}

PYTHON=$(pick_python)
PY_VERSION=$("$PYTHON" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
[[ $PY_VERSION == 3.11.* ]] || log "warning: Python $PY_VERSION, the requirements were pinned with 3.11"

# A venv is reused when it was built from the same requirements by the same interpreter version
# (the stamp is the same for every script: each reuses the others' venvs).
# ensure_venv DIR REQUIREMENTS IMPORTS
ensure_venv() {
    local venv=$1 requirements=$2 imports=$3 stamp
    stamp="$(sha256sum "$requirements" | cut -d' ' -f1) python-$PY_VERSION"
    if [[ -x $venv/bin/python && -f $venv/.interop-stamp ]] &&
        [[ $(cat "$venv/.interop-stamp") == "$stamp" ]] &&
        "$venv/bin/python" -c "import $imports" >/dev/null 2>&1; then
        log "reusing $venv (Python $PY_VERSION)"
        return 0
    fi
    log "creating $venv with $PYTHON (Python $PY_VERSION)"
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    make_venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-virtualenv \
        -r "$requirements" >&2
    echo "$stamp" >"$venv/.interop-stamp"
}

make_venv() {
    local venv=$1
    if "$PYTHON" -m venv "$venv" >"$WORK/venv.log" 2>&1; then
        return 0
    fi
    # Debian ships `venv`'s ensurepip in a separate package (python3.X-venv).
    if grep -q ensurepip "$WORK/venv.log" && [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        local pkg="python${PY_VERSION%.*}-venv"
        log "the venv module lacks ensurepip: installing $pkg with apt-get"
        rm -rf "$venv"
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >&2
        "$PYTHON" -m venv "$venv"
        return 0
    fi
    cat "$WORK/venv.log" >&2
    log "cannot create $venv with $PYTHON (on Debian: apt-get install python${PY_VERSION%.*}-venv)"
    return 1
}
