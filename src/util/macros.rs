//! Macros the crate's services share.

/// `get_ref`, `get_mut` and `into_inner` for a service that holds its inner service in a field
/// named `inner` and is generic over it as `S`: tower-http's idiom, written once.
macro_rules! define_inner_service_accessors {
    () => {
        /// The inner service.
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        /// The inner service, mutably.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        /// The inner service, unwrapped.
        pub fn into_inner(self) -> S {
            self.inner
        }
    };
}
