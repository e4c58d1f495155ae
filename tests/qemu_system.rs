//! ptemu's plugin in QEMU's system emulator (issue 52; spec/qemu.md QE23): QEMU 10's
//! `qemu-system-x86_64`, which `cargo xtask test` installs from Debian's bookworm-backports.

mod common;

use common::cli::text;
use common::qemu::{plugin, which};
use std::process::Command;

/// QEMU's major version, from its banner ("QEMU emulator version 10.0.2 (...)").
fn major(qemu: &str) -> u32 {
    let o = Command::new(which(qemu)).arg("--version").output().unwrap();
    let banner = text(&o.stdout);
    banner
        .split("version ")
        .nth(1)
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("{qemu}: no version in {banner:?}"))
}

/// QE23: one plugin library for both QEMUs. QEMU 10's system emulator (plugin API 2 to 4)
/// loads it: the library declares version 2 there (QEMU does not refuse it as "supports only a
/// minimum version of 2", as it refuses version 1), and the plugin's own install runs (here it
/// refuses an argument it does not know). QEMU 7.2's user-mode emulator takes version 1 (every `ptemu run` test, and
/// here a run of `true` with the plugin, which needs its socket: it refuses without one).
#[test]
fn qe23_the_plugin_declares_the_api_version_of_the_qemu_that_loads_it() {
    assert!(
        major("qemu-system-x86_64") >= 10,
        "cargo xtask test installs QEMU 10"
    );
    let plugin = plugin();
    // An argument the plugin refuses ends QEMU at once (a machine with no vCPU would idle).
    let mut with_arg = plugin.clone().into_os_string();
    with_arg.push(",bogus=1");
    let o = Command::new(which("qemu-system-x86_64"))
        .args(["-display", "none", "-nodefaults", "-M", "none", "-plugin"])
        .arg(&with_arg)
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert!(!o.status.success());
    assert!(!err.contains("minimum version"), "{err}");
    assert!(
        err.contains("unknown argument \"bogus=1\" in system mode"),
        "the plugin's install ran: {err}"
    );

    assert_eq!(
        major("qemu-x86_64"),
        7,
        "bookworm's qemu-user, which loads plugins"
    );
    let o = Command::new(which("qemu-x86_64"))
        // `-d plugin`: the plugin's own output (qemu_plugin_outs) goes to QEMU's log.
        .args(["-d", "plugin", "-plugin"])
        .arg(&plugin)
        .arg(which("true"))
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert!(!err.contains("API version"), "version 1 taken: {err}");
    assert!(
        err.contains("no fd=N argument"),
        "the plugin ran its install and asks for its socket: {err}"
    );
}

/// The guest the system-mode tests boot (issue 52's tests; tests/common/boot.rs): Debian's
/// kernel with an initramfs built here from busybox-static and a program of the test's, whose
/// `/init` runs it and powers off; QEMU ends with the guest, exit 0, the program's output on the
/// serial console.
#[test]
fn qe23_the_test_guest_boots_runs_its_program_and_powers_off() {
    let dir = tempfile::tempdir().unwrap();
    let guest = common::boot::guest();
    let src = dir.path().join("hello.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\nint main(void) { printf(\"hello from the guest\\n\"); return 0; }\n",
    )
    .unwrap();
    // Static: the initramfs holds no C library.
    let hello = common::qemu::gcc(&src, &dir.path().join("hello"), &["-static"]);
    let initrd = common::boot::initramfs(
        dir.path(),
        &guest,
        "/bin/busybox mount -t proc proc /proc\n/bin/hello\n/bin/busybox poweroff -f\n",
        &[("hello", &hello)],
    );
    let o = common::boot::boot(&guest, &initrd, &[]);
    let console = text(&o.stdout);
    assert!(o.status.success(), "{console}{}", text(&o.stderr));
    assert!(console.contains("hello from the guest"), "{console}");
    assert!(console.contains("reboot: Power down"), "{console}");
}

/// The block executions, those needing the registers and the derived addresses that were not
/// `rip`, from the plugin's line at exit in system mode.
fn system_counts(stderr: &str) -> (u64, u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("ptemu-qemu: system: "))
        .unwrap_or_else(|| panic!("no counts from the plugin: {stderr}"));
    let n: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .take(3)
        .map(|w| w.parse().unwrap())
        .collect();
    (n[0], n[1], n[2])
}

/// QE24: in system mode the plugin derives each block's real address from the flow (QEMU 10
/// reports a block reused at another virtual address at its first one) and reads the registers
/// only where the flow cannot tell. With `check=1` it also reads `rip` in every block: over a
/// whole boot (firmware, the kernel, init) and a position-independent program run twice (the
/// same physical pages at two addresses: QEMU's reused translations), no derived address
/// differs from `rip`, and under 1.5% of the blocks need the registers (0.56% measured with the
/// shadow stack of CALLs; 3.2% without it, which this bound catches).
#[test]
fn qe24_system_mode_derives_every_blocks_real_address() {
    let dir = tempfile::tempdir().unwrap();
    let guest = common::boot::guest();
    let src = dir.path().join("loop.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\nint main(void) { volatile long s = 0; for (long i = 0; i < 2000000; i++) s += i; printf(\"sum %ld\\n\", (long)s); return 0; }\n",
    )
    .unwrap();
    let program = common::qemu::gcc(&src, &dir.path().join("loop"), &["-static-pie"]);
    let initrd = common::boot::initramfs(
        dir.path(),
        &guest,
        "/bin/loop\n/bin/loop\n/bin/busybox poweroff -f\n",
        &[("loop", &program)],
    );
    let mut with_check = plugin().into_os_string();
    with_check.push(",check=1");
    let with_check = with_check.into_string().unwrap();
    let o = common::boot::boot(&guest, &initrd, &["-plugin", &with_check]);
    let console = text(&o.stdout);
    assert!(o.status.success(), "{console}{}", text(&o.stderr));
    assert_eq!(console.matches("sum 1999999000000").count(), 2, "{console}");
    let (blocks, needed, wrong) = system_counts(&text(&o.stderr));
    assert!(blocks > 100_000_000, "{blocks} block executions");
    assert_eq!(wrong, 0, "{}", text(&o.stderr));
    assert!(
        needed * 1000 < blocks * 15,
        "{needed} of {blocks} needed the registers"
    );
}
