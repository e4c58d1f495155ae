//! The shared library's SONAME: `libptemu.so`, the name `cargo xtask capi` installs it under.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libptemu.so");
}
