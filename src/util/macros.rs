//! Macros the crate's services share.

/// `get_ref`, `get_mut` and `into_inner` for a service that holds its inner service in a field
/// named `inner` and is generic over it as `S`: tower-http's idiom, written once.
macro_rules! define_inner_service_accessors {
    () => {
        /// Returns a reference to the inner service.
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        /// Returns a mutable reference to the inner service.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        /// Consumes the service, returning the inner service.
        pub fn into_inner(self) -> S {
            self.inner
        }
    };
}

/// A public body that is a newtype over a private one (its one pinned field, `inner`), so that
/// the type inside stays out of the API: tower-http's `opaque_body!`, for this crate's bodies.
///
/// Written once because every such body's `Body` impl is the same three lines of delegation.
macro_rules! opaque_body {
    (
        $(#[$attr:meta])*
        pub struct $name:ident $(<$param:ident>)? (inner: $inner:ty) -> Error = $error:ty
        $(where $($bound:tt)+)?
    ) => {
        pin_project_lite::pin_project! {
            $(#[$attr])*
            pub struct $name $(<$param>)? {
                #[pin]
                inner: $inner,
            }
        }

        impl $(<$param>)? http_body::Body for $name $(<$param>)? $(where $($bound)+)? {
            type Data = bytes::Bytes;
            type Error = $error;

            fn poll_frame(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
                self.project().inner.poll_frame(cx)
            }

            fn is_end_stream(&self) -> bool {
                self.inner.is_end_stream()
            }

            fn size_hint(&self) -> http_body::SizeHint {
                self.inner.size_hint()
            }
        }
    };
}
