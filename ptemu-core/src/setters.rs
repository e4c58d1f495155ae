//! `with_*` setters for the settings structs, so they can be `#[non_exhaustive]` (new fields
//! in a minor release) and still be built in one expression:
//! `TracerConfig::default().with_long_tnt(true).with_flush_bytes(0)`.

/// Generates `impl TYPE { pub fn SETTER(self, value: T) -> Self }` for each `SETTER => field: T`.
#[doc(hidden)]
#[macro_export]
macro_rules! with_setters {
    ($ty:ty { $($setter:ident => $field:ident : $fty:ty),* $(,)? }) => {
        impl $ty {
            $(
                #[doc = concat!("Sets `", stringify!($field), "` (see the field).")]
                #[must_use]
                pub fn $setter(mut self, value: $fty) -> Self {
                    self.$field = value;
                    self
                }
            )*
        }
    };
}
