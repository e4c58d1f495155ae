//! The C API from C (`capi/`, issue 26): the header compiles on its own as C11 and C++17 with
//! -Wall -Werror, and `examples/c/embed.c` (the scenario of `examples/embed.rs`), linked against
//! the static library and against the shared one, collects the same trace bytes, takes the same
//! PMIs and leaves the same MSRs as the Rust example. The libraries are built as `cargo xtask
//! capi` builds them (release, into `target/capi/build`; a no-op when it already ran).

#[allow(dead_code)] // the example's `main` and helpers the test does not call
#[path = "../examples/embed.rs"]
mod embed;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The system libraries a Rust static library needs on Linux (`rustc --print native-static-libs`).
const NATIVE_LIBS: &[&str] = &["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl", "-lc"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding `libptemu_capi.a` and `libptemu_capi.so`, built once per test run.
fn libs() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let target = root().join("target/capi/build");
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "ptemu-capi", "--release", "--target-dir"])
            .arg(&target)
            .current_dir(root())
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the C API failed");
        target.join("release")
    })
}

/// Runs a compiler; fails the test with its output.
fn compile(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_header_compiles_alone_as_c11_and_cpp17_with_all_warnings_as_errors() {
    let dir = tempfile::tempdir().unwrap();
    for (compiler, std, file) in [("cc", "-std=c11", "alone.c"), ("c++", "-std=c++17", "alone.cpp")] {
        let src = dir.path().join(file);
        std::fs::write(
            &src,
            "#include \"ptemu.h\"\nint main(void) { return ptemu_version() == 0; }\n",
        )
        .unwrap();
        compile(
            Command::new(compiler)
                .args([std, "-Wall", "-Wextra", "-pedantic", "-Werror", "-c", "-o"])
                .arg(dir.path().join(format!("{file}.o")))
                .arg("-I")
                .arg(root().join("capi/include"))
                .arg(&src),
        );
    }
}

/// The lines the C example prints, as the Rust example's summary gives them.
fn expected_lines(s: &embed::Summary) -> String {
    let mut want = format!(
        "events fed:      {}\nPMIs handled:    {} (the unit raised {})\nbytes collected: {} (the tracer produced {})\n",
        s.events,
        s.pmis_handled,
        s.pmi_events,
        s.collected.len(),
        s.produced
    );
    want.push_str(&embed::output_line(&s.output));
    want.push('\n');
    for (name, value) in &s.final_msrs {
        want.push_str(&format!("{name:<27} = {value:#018x}\n"));
    }
    want
}

/// Compiles embed.c with `link` (the library arguments), runs it, and checks it against the Rust
/// example.
fn c_example_matches_rust(link: &[&std::ffi::OsStr], dir: &Path) {
    let exe = dir.join("embed");
    compile(
        Command::new("cc")
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-I"])
            .arg(root().join("capi/include"))
            .arg(root().join("examples/c/embed.c"))
            .args(link)
            .args(NATIVE_LIBS)
            .arg("-o")
            .arg(&exe),
    );
    let trace = dir.join("trace.bin");
    let out = Command::new(&exe).arg(&trace).output().unwrap();
    assert!(
        out.status.success(),
        "embed failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rust = embed::run(20_000).expect("the Rust example runs");
    assert!(rust.pmis_handled >= 3, "the scenario takes PMIs");
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected_lines(&rust));
    let c_trace = std::fs::read(&trace).unwrap();
    assert!(
        c_trace == rust.collected,
        "the C example's trace differs from the Rust example's"
    );
}

#[test]
fn p7_the_c_example_on_the_static_library_gives_the_rust_examples_trace_pmis_and_msrs() {
    let dir = tempfile::tempdir().unwrap();
    let lib = libs().join("libptemu_capi.a");
    c_example_matches_rust(&[lib.as_os_str()], dir.path());
}

#[test]
fn p7_the_c_example_on_the_shared_library_gives_the_same() {
    let dir = tempfile::tempdir().unwrap();
    // Installed as libptemu.so, the name its SONAME gives (capi/build.rs).
    std::fs::copy(libs().join("libptemu_capi.so"), dir.path().join("libptemu.so")).unwrap();
    let search = format!("-L{}", dir.path().display());
    let rpath = format!("-Wl,-rpath,{}", dir.path().display());
    c_example_matches_rust(&[search.as_ref(), "-lptemu".as_ref(), rpath.as_ref()], dir.path());
}
