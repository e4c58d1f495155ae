//! Project tasks: `cargo xtask test`, `cargo xtask simulate`, `cargo xtask bench`.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{exit, Command};

/// A Debian package the tests need, and the command that shows it is installed.
struct SystemPackage {
    /// Debian package name.
    package: &'static str,
    /// A shell command that succeeds when the package is installed.
    probe: &'static str,
}

/// System packages the test suite needs beyond the Rust toolchain: the libipt oracle (`libipt-sys`)
/// builds libipt with cmake and runs bindgen, which loads libclang; the perf oracle is Debian's
/// `linux-perf` (`perf script` on ptemu's perf.data, tests/perf_data.rs); `ptemu run` needs
/// Debian's `qemu-user` (tests/qemu_run.rs); `ptemu pttc`'s .bin files are compared with `yasm`'s
/// (tests/pttc.rs).
const TEST_PACKAGES: &[SystemPackage] = &[
    SystemPackage { package: "cmake", probe: "command -v cmake" },
    SystemPackage { package: "linux-perf", probe: "perf --version" },
    // `ptemu run` runs real programs under QEMU's user-mode emulator (tests/qemu_run.rs).
    SystemPackage { package: "qemu-user", probe: "command -v qemu-x86_64" },
    // `ptemu pttc` writes what `yasm -f bin` writes (tests/pttc.rs compares them).
    SystemPackage { package: "yasm", probe: "command -v yasm" },
    // `ptemu boot`'s tests boot the kernel inside Debian's bzImage, unpacked with `xz`
    // (tests/common/boot.rs `pvh_kernel`).
    SystemPackage { package: "xz-utils", probe: "command -v xz" },
    SystemPackage {
        package: "libclang-dev",
        // The package, or libclang.so itself (what it adds); not any libclang-*.so*, which also
        // matches the libclang-cpp.so.N other packages bring and bindgen cannot use.
        probe: "dpkg-query -W -f '${Status}' libclang-dev 2>/dev/null | grep -q 'ok installed' || ls /usr/lib/llvm-*/lib/libclang.so /usr/lib/*/libclang.so 2>/dev/null | grep -q .",
    },
];

mod system_qemu;

fn main() {
    let args: Vec<String> = env::args().skip(1).collect();
    let (task, rest) = args
        .split_first()
        .map(|(t, r)| (t.as_str(), r))
        .unwrap_or(("help", &[]));
    let result = match task {
        "test" => test(),
        "simulate" => simulate(rest),
        "bench" => bench(rest),
        "fuzz" => fuzz(rest),
        "hwcheck" => hwcheck(rest),
        "capi" => capi(),
        "system-qemu" => system_qemu::ensure_system_qemu(),
        _ => {
            eprintln!("usage: cargo xtask <test | simulate [ARGS...] | bench [ARGS...] | fuzz [SECONDS] [TARGET...] | capi | hwcheck [DIR]>");
            exit(usage_exit_code(task));
        }
    };
    if let Err(e) = result {
        eprintln!("xtask {task}: {e}");
        exit(1);
    }
}

/// The exit code after printing the usage: 0 when it was asked for (`help`, `--help`, `-h`), 2
/// for an unknown task.
fn usage_exit_code(task: &str) -> i32 {
    if matches!(task, "help" | "--help" | "-h") {
        0
    } else {
        2
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace")
        .to_path_buf()
}

fn cargo() -> Command {
    let mut c = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

fn run(mut cmd: Command) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    eprintln!("xtask: running {shown}");
    let status = cmd.status().map_err(|e| format!("cannot start {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed ({status})"))
    }
}

/// Installs missing system packages (root + apt-get), or prints the command and fails.
fn ensure_packages(packages: &[SystemPackage]) -> Result<(), String> {
    let missing = missing_packages(packages, shell_succeeds);
    if missing.is_empty() {
        return Ok(());
    }
    let install = format!("apt-get install -y {}", missing.join(" "));
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"));
    if !is_root {
        return Err(format!(
            "missing system packages; run as root: apt-get update && {install}"
        ));
    }
    let mut update = Command::new("apt-get");
    update.arg("update");
    run(update)?;
    let mut cmd = Command::new("apt-get");
    cmd.args(["install", "-y"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive");
    run(cmd)
}

/// Whether the shell command `script` (a [`SystemPackage::probe`], say) succeeds, run with
/// `sh -c` as written (not wrapped in another command); its output is discarded.
fn shell_succeeds(script: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .output()
        .is_ok_and(|o| o.status.success())
}

fn missing_packages(packages: &[SystemPackage], present: impl Fn(&str) -> bool) -> Vec<&'static str> {
    packages
        .iter()
        .filter(|p| !present(p.probe))
        .map(|p| p.package)
        .collect()
}

fn ensure_components() -> Result<(), String> {
    for (component, probe) in [("rustfmt", "fmt"), ("clippy", "clippy")] {
        let ok = cargo()
            .args([probe, "--version"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            let mut cmd = Command::new("rustup");
            cmd.args(["component", "add", component]);
            run(cmd)?;
        }
    }
    Ok(())
}

/// `cargo ARGS`.
fn cargo_with(args: &[&str]) -> Command {
    let mut c = cargo();
    c.args(args);
    c
}

/// `cargo ARGS -- -D warnings` (clippy).
fn lint(args: &[&str]) -> Command {
    let mut c = cargo_with(args);
    c.args(["--", "-D", "warnings"]);
    c
}

/// One stage of `cargo xtask test`.
type Stage = Box<dyn FnOnce() -> Result<(), String>>;

fn test() -> Result<(), String> {
    let mut stages: Vec<(&str, Stage)> = vec![
        (
            "system packages and toolchain components",
            Box::new(|| {
                ensure_packages(TEST_PACKAGES)
                    .and_then(|()| ensure_components())
                    // QEMU 10's system emulator for the system-mode tests (tests/qemu_system.rs).
                    .and_then(|()| system_qemu::ensure_system_qemu())
            }),
        ),
        (
            "cargo fmt --check",
            Box::new(move || run(cargo_with(&["fmt", "--all", "--", "--check"]))),
        ),
        (
            "clippy, the workspace",
            Box::new(move || run(lint(&["clippy", "--workspace", "--all-targets"]))),
        ),
        // The model alone, as an emulator embeds it: no default features (no mmap, no tracing),
        // and the default ones without serde (the workspace build turns serde on); and the
        // library without the command line.
        (
            "clippy, ptemu-core without default features",
            Box::new(move || {
                run(lint(&[
                    "clippy",
                    "-p",
                    "ptemu-core",
                    "--no-default-features",
                    "--all-targets",
                ]))
            }),
        ),
        (
            "check, ptemu-core with its default features",
            Box::new(move || run(cargo_with(&["check", "-p", "ptemu-core", "--all-targets"]))),
        ),
        (
            "clippy, the library without the command line",
            Box::new(move || run(lint(&["clippy", "-p", "ptemu", "--no-default-features", "--lib"]))),
        ),
        // The fuzz crate (outside the workspace) must keep building against the library.
        (
            "check, the fuzz targets",
            Box::new(move || {
                let mut fuzz = cargo_with(&["check", "--bins", "--manifest-path"]);
                fuzz.arg(root().join("fuzz/Cargo.toml"));
                run(fuzz)
            }),
        ),
        // The C API: libraries, header checks, the C example (its output is compared with the
        // Rust example's by tests/c_api.rs, which reuses this build).
        ("the C API and its C example", Box::new(capi)),
        // `cargo test` builds no cdylib: the QEMU plugin that tests/qemu_run.rs loads from beside
        // the ptemu binary comes from a plain build.
        (
            "the QEMU plugin",
            Box::new(move || run(cargo_with(&["build", "-p", "ptemu-qemu"]))),
        ),
        (
            "every test (cargo test --workspace --all-targets)",
            Box::new(move || run(cargo_with(&["test", "--workspace", "--all-targets"]))),
        ),
        // ptemu-core's vm-memory adapter (a feature the workspace build leaves off).
        (
            "clippy and tests, ptemu-core's vm-memory adapter",
            Box::new(move || {
                run(lint(&[
                    "clippy",
                    "-p",
                    "ptemu-core",
                    "--features",
                    "vm-memory",
                    "--all-targets",
                ]))?;
                run(cargo_with(&[
                    "test",
                    "-p",
                    "ptemu-core",
                    "--features",
                    "vm-memory",
                    "--all-targets",
                ]))
            }),
        ),
        (
            "doc tests",
            Box::new(move || run(cargo_with(&["test", "--workspace", "--doc"]))),
        ),
        // The API docs build without a warning (a broken link, a bit range read as a link).
        (
            "API docs without a warning",
            Box::new(move || {
                let mut api = cargo_with(&["doc", "--no-deps", "--workspace"]);
                api.env("RUSTDOCFLAGS", "-D warnings");
                run(api)
            }),
        ),
    ];
    // Progress between stages, and what each took: the README says what to expect.
    let total = stages.len();
    let started = std::time::Instant::now();
    let mut took = Vec::new();
    for (k, (name, stage)) in stages.drain(..).enumerate() {
        eprintln!(
            "xtask test: [{}/{total}] {name} (at {:.0} s)",
            k + 1,
            started.elapsed().as_secs_f64()
        );
        let t = std::time::Instant::now();
        let result = stage();
        took.push((name, t.elapsed().as_secs_f64()));
        if let Err(e) = result {
            eprintln!(
                "xtask test: [{}/{total}] {name} failed after {:.0} s",
                k + 1,
                t.elapsed().as_secs_f64()
            );
            return Err(e);
        }
    }
    eprintln!(
        "xtask test: all {total} stages passed in {:.0} s:",
        started.elapsed().as_secs_f64()
    );
    for (name, secs) in took {
        eprintln!("  {secs:>6.0} s  {name}");
    }
    Ok(())
}

/// Where `cargo xtask capi` builds the C API (`tests/c_api.rs` builds into the same place).
const CAPI_BUILD: &str = "target/capi/build";

/// The system libraries a Rust static library needs on Linux (`rustc --print native-static-libs`).
const CAPI_NATIVE_LIBS: &[&str] = &["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl", "-lc"];

/// Builds the C API: `target/capi/include/ptemu.h`, `target/capi/lib/libptemu.a` and
/// `libptemu.so`; checks that the header compiles alone as C11 and C++17 with -Wall -Werror;
/// compiles `examples/c/embed.c` against the static library to `target/capi/bin/embed` and runs it.
fn capi() -> Result<(), String> {
    let root = root();
    // The checked-in header must be what cbindgen makes of the code.
    let mut header = cargo();
    header.args(["test", "-p", "ptemu-capi", "--test", "header"]);
    run(header)?;
    let mut build = cargo();
    build.args([
        "build",
        "-p",
        "ptemu-capi",
        "--release",
        "--target-dir",
        CAPI_BUILD,
    ]);
    run(build)?;
    let out = root.join("target/capi");
    let built = root.join(CAPI_BUILD).join("release");
    for dir in ["include", "lib", "bin"] {
        std::fs::create_dir_all(out.join(dir)).map_err(|e| format!("{}: {e}", out.join(dir).display()))?;
    }
    let copy = |from: PathBuf, to: PathBuf| {
        std::fs::copy(&from, &to)
            .map(drop)
            .map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))
    };
    copy(root.join("capi/include/ptemu.h"), out.join("include/ptemu.h"))?;
    copy(built.join("libptemu_capi.a"), out.join("lib/libptemu.a"))?;
    copy(built.join("libptemu_capi.so"), out.join("lib/libptemu.so"))?;
    let include = out.join("include");
    for (compiler, std, lang) in [("cc", "-std=c11", "c"), ("c++", "-std=c++17", "c++")] {
        let probe = out.join(format!("header-check.{}", if lang == "c" { "c" } else { "cpp" }));
        std::fs::write(&probe, "#include \"ptemu.h\"\n").map_err(|e| format!("{}: {e}", probe.display()))?;
        let mut cc = Command::new(compiler);
        cc.args([
            std,
            "-Wall",
            "-Wextra",
            "-pedantic",
            "-Werror",
            "-fsyntax-only",
            "-I",
        ])
        .arg(&include)
        .arg(&probe);
        run(cc)?;
    }
    let mut cc = Command::new("cc");
    cc.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-I"])
        .arg(&include)
        .arg(root.join("examples/c/embed.c"))
        .arg(out.join("lib/libptemu.a"))
        .args(CAPI_NATIVE_LIBS)
        .arg("-o")
        .arg(out.join("bin/embed"));
    run(cc)?;
    let mut embed = Command::new(out.join("bin/embed"));
    embed.arg(out.join("embed-trace.bin"));
    run(embed)
}

/// Micro-ops of the main job's generated Penn trace: about 400,000 instructions and 57 KB of
/// trace, so the 16 KiB ring of `examples/ring-layout.toml` fills three times over.
const MAIN_JOB_RECORDS: &str = "600000";

/// `ptemu simulate ARGS…` (release build); without `--out`, into `target/ptemu-simulate/`, and
/// without `--layout` (or a `--fault` that makes its own), through the main job's 16 KiB ring of
/// `examples/ring-layout.toml`, so the summary shows PMIs and laps. Relative paths are taken from
/// the directory `cargo xtask` runs in. With no arguments, the main job: a generated Penn trace
/// (`ptemu gen --format penn --records 600000 --seed 1`, written to
/// `target/ptemu-simulate-input/`) through that ring.
fn simulate(args: &[String]) -> Result<(), String> {
    let ptemu = |sub: &str| {
        let mut cmd = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.arg("run")
            .arg("--manifest-path")
            .arg(root().join("Cargo.toml"))
            // Not --quiet: a first build takes a minute, and cargo's progress shows it is working.
            .args(["--release", "--bin", "ptemu", "--", sub]);
        cmd
    };
    let mut cmd = ptemu("simulate");
    if !names_an_input(args) {
        let input = root().join("target/ptemu-simulate-input/penn-600k.trace");
        let mut gen = ptemu("gen");
        gen.args([
            "--format",
            "penn",
            "--records",
            MAIN_JOB_RECORDS,
            "--seed",
            "1",
            "--quiet",
            "-o",
        ])
        .arg(&input);
        std::fs::create_dir_all(input.parent().expect("a file in a directory"))
            .map_err(|e| format!("{}: {e}", input.display()))?;
        run(gen)?;
        cmd.arg(&input).args(["--format", "penn"]);
    }
    // The main job's layout unless the arguments give one, or a wrap or stop fault, which
    // brings its own buffer and refuses another layout.
    let makes_layout = |fault: &str| fault.starts_with("wrap") || fault.starts_with("stop");
    let own_layout = args.iter().enumerate().any(|(i, a)| {
        a == "--layout"
            || a.starts_with("--layout=")
            || a.strip_prefix("--fault=").is_some_and(makes_layout)
            || (a == "--fault" && args.get(i + 1).is_some_and(|f| makes_layout(f)))
    });
    if !own_layout {
        // A CPU whose ToPA takes a single output region gets the ring as one region (T8).
        let single = args.windows(2).any(|w| w[0] == "--cpu" && w[1] == "broadwell")
            || args.iter().any(|a| a == "--cpu=broadwell");
        let ring = if single {
            "examples/ring-layout-single.toml"
        } else {
            "examples/ring-layout.toml"
        };
        cmd.arg("--layout").arg(root().join(ring));
    }
    cmd.args(args);
    if !args.iter().any(|a| a == "--out" || a.starts_with("--out=")) {
        cmd.arg("--out").arg(root().join("target/ptemu-simulate"));
    }
    run(cmd)
}

/// `ptemu simulate`'s options that take no value (every other `--option` takes the next
/// argument unless it is `--option=value`).
const SIMULATE_SWITCHES: [&str; 9] = [
    "--lenient",
    "--no-image",
    "--no-truth",
    "--perf-data",
    "--force",
    "-q",
    "--quiet",
    "-v",
    "--verbose",
];

/// Whether `args` (for `ptemu simulate`) name an input: a positional argument, or `--format`
/// (the bundled sample of that format). Options alone (`--perf-data`, `--cpu skylake`) keep
/// the main job's input (issue 54 §4).
fn names_an_input(args: &[String]) -> bool {
    let mut k = 0;
    while let Some(a) = args.get(k) {
        if a == "--format" || a.starts_with("--format=") {
            return true;
        }
        if !a.starts_with('-') || a == "-" {
            return true;
        }
        let takes_value =
            !a.contains('=') && !SIMULATE_SWITCHES.contains(&a.as_str()) && !a.starts_with("-vv");
        k += if takes_value { 2 } else { 1 };
    }
    false
}

/// `ptemu repack --compare` on every `.pt` file of DIR (default `../shared/hw-traces`, real
/// hardware traces that are not part of the project): how many PAD runs the skylake layout
/// predicts (spec/hardware.md). Not run in CI: the traces are not in a clean clone.
fn hwcheck(args: &[String]) -> Result<(), String> {
    let dir = args
        .first()
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("../shared/hw-traces"));
    let mut traces: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pt"))
        .collect();
    traces.sort();
    if traces.is_empty() {
        return Err(format!("{}: no .pt files", dir.display()));
    }
    for t in traces {
        let mut cmd = cargo();
        cmd.args([
            "run",
            "--quiet",
            "--release",
            "--bin",
            "ptemu",
            "--",
            "repack",
            "--cpu",
            "skylake",
            "--compare",
        ])
        .arg(&t);
        run(cmd)?;
    }
    Ok(())
}

/// Every benchmark: the output unit against memcpy, the packet layer against libipt (which needs
/// the test packages: they are installed first, as for `cargo xtask test`).
fn bench(args: &[String]) -> Result<(), String> {
    ensure_packages(TEST_PACKAGES)?;
    // The qemu_run bench runs `ptemu run` with the plugin beside the ptemu it builds.
    let mut plugin = cargo();
    plugin.args(["build", "--release", "-p", "ptemu-qemu"]);
    run(plugin)?;
    for name in [
        "output", "packets", "dump", "tracer", "blocks", "sources", "simulate", "layout", "pttc", "verify",
        "qemu_run",
    ] {
        let mut cmd = cargo();
        cmd.args(["bench", "--bench", name, "--"]).args(args);
        run(cmd)?;
    }
    Ok(())
}

/// A fuzz target, the test files that seed its corpus, and whether its input starts with a mode
/// byte (the readers' targets: strict 0 or lenient 1), so each seed is stored once per mode.
struct FuzzTarget {
    name: &'static str,
    seeds: &'static [&'static str],
    mode_byte: bool,
}

/// The fuzz targets: one per reader, the packet decoder, the output unit, the layout parser, the
/// tracer config, the `asm` text, `verify`'s truth and decoder-output readers, the C API, the
/// QEMU plugin's stream and `pttc`'s .ptt files.
const FUZZ_TARGETS: &[FuzzTarget] = &[
    FuzzTarget {
        name: "penn",
        seeds: &[
            "tests/data/penn/sjeng-1K.trace",
            "tests/data/penn/CSC656-test-handedited.trace",
        ],
        mode_byte: true,
    },
    FuzzTarget {
        name: "byu",
        seeds: &[],
        mode_byte: true,
    },
    FuzzTarget {
        name: "byu_p2",
        seeds: &["tests/data/byu-p2/trace_small.tr"],
        mode_byte: true,
    },
    FuzzTarget {
        name: "kaplan",
        seeds: &[],
        mode_byte: true,
    },
    FuzzTarget {
        name: "gem5",
        seeds: &["tests/data/gem5/system.cpu.traceListener.fetchtrace.proto.gz"],
        mode_byte: true,
    },
    FuzzTarget {
        name: "packets",
        seeds: &[],
        mode_byte: false,
    },
    FuzzTarget {
        name: "output_unit",
        seeds: &[],
        mode_byte: false,
    },
    FuzzTarget {
        name: "layout",
        seeds: &["examples/demo-layout.toml", "src/simulate/default-layout.toml"],
        mode_byte: false,
    },
    FuzzTarget {
        name: "tracer_config",
        seeds: &["examples/tracer-config.toml"],
        mode_byte: false,
    },
    FuzzTarget {
        name: "asm",
        seeds: &["tests/data/asm/libipt-golden.txt"],
        mode_byte: false,
    },
    FuzzTarget {
        name: "truth",
        seeds: &[
            "tests/data/truth/sjeng-1K.truth.jsonl",
            "tests/data/truth/sjeng-1K.truth.bin",
        ],
        mode_byte: false,
    },
    FuzzTarget {
        name: "capi",
        seeds: &[],
        mode_byte: false,
    },
    FuzzTarget {
        name: "qemu",
        seeds: &[],
        mode_byte: false,
    },
    FuzzTarget {
        name: "pttc",
        seeds: &[
            "tests/data/pttc/good.ptt",
            "tests/data/pttc/unknown_directive.ptt",
            "tests/data/pttc/missing_label.ptt",
        ],
        mode_byte: false,
    },
    // `ptemu dump --format ptdump` with a perf_event sideband file (src/ptdump/).
    FuzzTarget {
        name: "ptdump",
        seeds: &["tests/data/ptdump/fuzz-seed.bin"],
        mode_byte: false,
    },
];

/// Runs every fuzz target (or the named ones) for SECONDS each (default 60) with cargo-fuzz,
/// installing it when missing. The stable toolchain runs it with RUSTC_BOOTSTRAP=1 (cargo-fuzz
/// needs `-Zsanitizer`). Corpora start from the test samples and persist in fuzz/corpus/.
fn fuzz(args: &[String]) -> Result<(), String> {
    let (seconds, names) = match args.first().map(|a| a.parse::<u64>()) {
        Some(Ok(n)) => (n, &args[1..]),
        _ => (60, args),
    };
    if !shell_succeeds("cargo fuzz --version") {
        let mut c = cargo();
        c.args(["install", "cargo-fuzz", "--locked"]);
        run(c)?;
    }
    let fuzz_dir = root().join("fuzz");
    let mut summary = Vec::new();
    for FuzzTarget {
        name: target,
        seeds,
        mode_byte,
    } in FUZZ_TARGETS
    {
        if !names.is_empty() && !names.iter().any(|n| n == target) {
            continue;
        }
        let corpus = fuzz_dir.join("corpus").join(target);
        std::fs::create_dir_all(&corpus).map_err(|e| format!("{}: {e}", corpus.display()))?;
        for (i, seed) in seeds.iter().enumerate() {
            let body = std::fs::read(root().join(seed)).map_err(|e| format!("{seed}: {e}"))?;
            if !mode_byte {
                let path = corpus.join(format!("seed-{i}"));
                std::fs::write(&path, &body).map_err(|e| format!("{}: {e}", path.display()))?;
                continue;
            }
            // The first byte picks strict (0) or lenient (1) reading; seed both.
            for mode in [0u8, 1] {
                let mut data = vec![mode];
                data.extend_from_slice(&body);
                let path = corpus.join(format!("seed-{i}-{mode}"));
                std::fs::write(&path, data).map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
        let mut c = cargo();
        c.current_dir(&fuzz_dir).env("RUSTC_BOOTSTRAP", "1").args([
            "fuzz",
            "run",
            target,
            "--",
            &format!("-max_total_time={seconds}"),
            "-max_len=65536",
        ]);
        let started = std::time::Instant::now();
        let result = run(c);
        summary.push(format!(
            "{target}: {} after {:.0} s",
            if result.is_ok() {
                "no crash, no hang"
            } else {
                "FAILED"
            },
            started.elapsed().as_secs_f64()
        ));
        result.map_err(|e| format!("{}\n{e}", summary.join("\n")))?;
    }
    eprintln!("xtask fuzz:\n  {}", summary.join("\n  "));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asking_for_help_exits_0_and_an_unknown_task_2() {
        assert_eq!(usage_exit_code("--help"), 0);
        assert_eq!(usage_exit_code("-h"), 0);
        assert_eq!(usage_exit_code("help"), 0);
        assert_eq!(usage_exit_code("tset"), 2);
    }

    #[test]
    fn sim17_options_alone_keep_the_main_jobs_input() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(!names_an_input(&v(&[])));
        assert!(!names_an_input(&v(&["--perf-data"])));
        assert!(!names_an_input(&v(&["--cpu", "skylake", "--perf-data", "-q"])));
        assert!(!names_an_input(&v(&["--ctl", "DisRETC=1", "--out", "x", "-vv"])));
        assert!(!names_an_input(&v(&["--layout=a.toml", "--no-truth"])));
        assert!(names_an_input(&v(&["trace.penn", "--format", "penn"])));
        assert!(names_an_input(&v(&["--format", "penn"])));
        assert!(names_an_input(&v(&["--cpu", "skylake", "-", "--format", "byu"])));
        assert!(names_an_input(&v(&["--perf-data", "in.trace"])));
    }

    #[test]
    fn only_absent_packages_are_installed() {
        let pkgs = [
            SystemPackage {
                package: "cmake",
                probe: "command -v cmake",
            },
            SystemPackage {
                package: "libclang-dev",
                probe: "test -e /usr/lib/llvm/libclang.so",
            },
        ];
        assert_eq!(
            missing_packages(&pkgs, |p| p == "command -v cmake"),
            vec!["libclang-dev"]
        );
        assert!(missing_packages(&pkgs, |_| true).is_empty());
    }

    /// A probe for something absent must fail, or `cargo xtask test` skips the install on a fresh
    /// machine (it once wrapped every probe in `command -v`, which found `command` itself).
    #[test]
    fn probes_run_as_written() {
        assert!(shell_succeeds("command -v sh"));
        assert!(!shell_succeeds("command -v ptemu-no-such-command-7f3a"));
        assert!(!shell_succeeds(
            "ls /ptemu-no-such-dir/*.so 2>/dev/null | grep -q ."
        ));
    }

    /// `cargo xtask fuzz` runs exactly the targets the fuzz crate declares, each with its source
    /// file, and every seed file exists.
    #[test]
    fn fuzz_targets_match_the_fuzz_crate() {
        let manifest = std::fs::read_to_string(root().join("fuzz/Cargo.toml")).unwrap();
        let mut declared: Vec<&str> = manifest
            .lines()
            .filter_map(|l| l.strip_prefix("name = \""))
            .filter_map(|l| l.strip_suffix('"'))
            .filter(|n| *n != "ptemu-fuzz")
            .collect();
        declared.sort_unstable();
        let mut listed: Vec<&str> = FUZZ_TARGETS.iter().map(|t| t.name).collect();
        listed.sort_unstable();
        assert_eq!(listed, declared);
        for t in FUZZ_TARGETS {
            let src = root().join(format!("fuzz/fuzz_targets/{}.rs", t.name));
            assert!(src.exists(), "{}", src.display());
            for seed in t.seeds {
                assert!(root().join(seed).exists(), "{seed}");
            }
        }
    }
}
