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
/// loads it: the library declares version 4 there (QEMU does not refuse it as "supports only a
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

/// The tests' guest with an initramfs whose `/init` runs a position-independent static program
/// twice (a loop of `n` additions that prints "sum N"; its two runs map the same physical pages
/// at two addresses) and powers off.
fn loop_twice(dir: &std::path::Path, n: u64) -> (common::boot::Guest, std::path::PathBuf) {
    let guest = common::boot::guest();
    let src = dir.join("loop.c");
    std::fs::write(
        &src,
        format!("#include <stdio.h>\nint main(void) {{ volatile long s = 0; for (long i = 0; i < {n}; i++) s += i; printf(\"sum %ld\\n\", (long)s); return 0; }}\n"),
    )
    .unwrap();
    let program = common::qemu::gcc(&src, &dir.join("loop"), &["-static-pie"]);
    let initrd = common::boot::initramfs(
        dir,
        &guest,
        "/bin/loop\n/bin/loop\n/bin/busybox poweroff -f\n",
        &[("loop", &program)],
    );
    (guest, initrd)
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

/// The exceptions and interrupts the plugin found (QE25), as `(vector, from)`, in order, from its
/// `check=1` lines "ptemu-qemu: entry v=VV [int ]from=0xADDR".
fn plugin_entries(stderr: &str) -> Vec<(u8, u64)> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("ptemu-qemu: entry v="))
        .map(|l| {
            let (v, rest) = l.split_once(' ').unwrap();
            let from = rest.rsplit_once("from=0x").unwrap().1;
            (
                u8::from_str_radix(v, 16).unwrap(),
                u64::from_str_radix(from, 16).unwrap(),
            )
        })
        .collect()
}

/// The exceptions and interrupts QEMU itself delivered (`-d int`: a line
/// "N: v=VV e=EEEE i=I cpl=C IP=CS:RIP pc=... ..." each, RIP the frame's), as `(vector, RIP)`.
fn qemu_entries(log: &str) -> Vec<(u8, u64)> {
    log.lines()
        .filter(|l| l.contains(": v=") && l.contains(" IP="))
        .map(|l| {
            let v = l.split(" v=").nth(1).unwrap().split(' ').next().unwrap();
            let ip = l.split(" IP=").nth(1).unwrap().split(' ').next().unwrap();
            let rip = ip.split(':').nth(1).unwrap();
            (
                u8::from_str_radix(v, 16).unwrap(),
                u64::from_str_radix(rip, 16).unwrap(),
            )
        })
        .collect()
}

/// QE24: in system mode the plugin derives each block's real address from the flow (QEMU 10
/// reports a block reused at another virtual address at its first one) and reads the registers
/// only where the flow cannot tell. With `check=1` it also reads `rip` in every block: over a
/// whole boot (firmware, the kernel, init) and a position-independent program run twice (the
/// same physical pages at two addresses: QEMU's reused translations), no derived address
/// differs from `rip`, and under 1.5% of the blocks need the registers (0.56% measured with the
/// shadow stack of CALLs; 3.2% without it, which this bound catches).
///
/// QE25, in the same boot: every exception and interrupt QEMU delivered in long mode (its own
/// `-d int` log of the run) is found by the plugin, in the same order, with its vector (the IDT
/// entry point the block is) and the RIP of the frame the CPU pushed (the FUP's IP: the faulting
/// instruction, the one an interrupt came before, an INT3's own), none of them unexplained; some
/// page faults stop their block part-way; every CR3 value comes right after a block that writes
/// CR3.
#[test]
fn qe24_qe25_system_mode_derives_every_blocks_address_and_entry() {
    let dir = tempfile::tempdir().unwrap();
    let (guest, initrd) = loop_twice(dir.path(), 2_000_000);
    let mut with_check = plugin().into_os_string();
    with_check.push(",check=1");
    let with_check = with_check.into_string().unwrap();
    let log = dir.path().join("int.log");
    let log_arg = log.to_str().unwrap();
    let o = common::boot::boot(
        &guest,
        &initrd,
        &["-plugin", &with_check, "-d", "int", "-D", log_arg],
    );
    let console = text(&o.stdout);
    let stderr = text(&o.stderr);
    assert!(o.status.success(), "{console}{stderr}");
    assert_eq!(console.matches("sum 1999999000000").count(), 2, "{console}");
    let (blocks, needed, wrong) = system_counts(&stderr);
    assert!(blocks > 100_000_000, "{blocks} block executions");
    assert_eq!(wrong, 0, "{stderr}");
    assert!(
        needed * 1000 < blocks * 15,
        "{needed} of {blocks} needed the registers"
    );

    let found = plugin_entries(&stderr);
    let delivered = qemu_entries(&std::fs::read_to_string(&log).unwrap());
    assert!(delivered.len() > 500, "{} entries in QEMU's log", delivered.len());
    assert!(delivered.iter().any(|&(v, _)| v == 14), "page faults");
    assert!(delivered.iter().any(|&(v, _)| v >= 32), "interrupts");
    if let Some(k) = (0..found.len().max(delivered.len())).find(|&k| found.get(k) != delivered.get(k)) {
        panic!(
            "entry {k} of {} (QEMU delivered {}): the plugin found {:x?}, QEMU delivered {:x?}",
            found.len(),
            delivered.len(),
            found.get(k),
            delivered.get(k)
        );
    }
    let line = stderr
        .lines()
        .find(|l| l.starts_with("ptemu-qemu: system entries: "))
        .unwrap_or_else(|| panic!("no entry counts: {stderr}"));
    assert!(line.contains(" 0 unexplained,"), "{line}");
    assert!(
        line.contains(" 0 after a block that stopped early unexplained;"),
        "{line}"
    );
    assert!(line.contains("(0 not after a write)"), "{line}");
    assert!(!line.contains("(0 stopping their block part-way)"), "{line}");
}

/// QE26: ptemu reads the plugin's stream of a whole machine and follows every vCPU's blocks
/// again by the plugin's own flow rules, from the registers records alone where the plugin read
/// them. A boot with two vCPUs, a program run twice: the instructions ptemu finds retired, plus
/// the faulting ones (which QEMU's inline count reaches before the fault), equal the count of an
/// independent plugin in the same QEMU run (tests/data/qemu/count_insns.c: an inline add before
/// every instruction), which also makes ptemu's follow of the blocks a fault stopped part-way
/// exact; every exception and interrupt QEMU's own `-d int` log lists is among the vCPUs'
/// entries (the log does not say which vCPU: compared as a multiset), none unexplained; both
/// vCPUs ran; and the plugin's own count of the blocks' instructions agrees with the stream
/// (checked by `record_flow` itself).
#[test]
fn qe26_ptemu_follows_every_vcpus_blocks_from_the_plugins_stream() {
    let dir = tempfile::tempdir().unwrap();
    let (guest, initrd) = loop_twice(dir.path(), 1_000_000);
    let counter = counter(dir.path());
    let counted = dir.path().join("counted.txt");
    let log = dir.path().join("int.log");
    let extra: Vec<std::ffi::OsString> = vec![
        "-plugin".into(),
        format!("{},out={}", counter.display(), counted.display()).into(),
        "-d".into(),
        "int".into(),
        "-D".into(),
        log.clone().into(),
    ];
    let options = ptemu::machine::BootOptions::new(which("qemu-system-x86_64"), plugin(), &guest.kernel)
        .with_initrd(Some(initrd))
        .with_append("console=ttyS0 panic=-1 quiet".into())
        .with_smp(2)
        .with_capture_console(true)
        .with_extra(extra);
    let flow = ptemu::machine::record_flow(&options).unwrap();
    let console = text(flow.console.as_deref().unwrap_or_default());
    assert!(flow.status.unwrap().success(), "{console}");
    assert_eq!(console.matches("sum 499999500000").count(), 2, "{console}");
    assert_eq!(flow.vcpus.len(), 2, "{:?}", flow.vcpus);
    assert!(flow.vcpus.iter().all(|v| v.blocks > 1000), "{:?}", flow.vcpus);

    let reached: u64 = flow.vcpus.iter().map(|v| v.instructions + v.faults).sum();
    let (count, _, _) = self::counted(&counted);
    // The counting plugin counts a store twice where QEMU started it, found that it changed the
    // code of its own block, and ran it again alone: at most once a split into such a block.
    let restarts: u64 = flow.vcpus.iter().map(|v| v.store_restarts).sum();
    assert!(
        reached <= count && count - reached <= restarts,
        "instructions reached: ptemu {reached}, the counting plugin {count}, {restarts} stores run again: {:?}",
        flow.vcpus.iter().map(|v| (v.blocks, v.instructions, v.faults, v.splits, v.store_restarts, v.entries.len())).collect::<Vec<_>>()
    );
    let faults: u64 = flow.vcpus.iter().map(|v| v.faults).sum();
    eprintln!(
        "qe26: {reached} instructions reached ({count} counted, {restarts} stores run again), {} stream bytes; by vCPU (blocks, retired, faults, splits, entries): {:?}",
        flow.stream_bytes,
        flow.vcpus.iter().map(|v| (v.blocks, v.instructions, v.faults, v.splits, v.entries.len())).collect::<Vec<_>>()
    );
    assert!(faults > 0, "some page faults stop their block part-way");

    let mut found: Vec<(u8, u64)> = flow
        .vcpus
        .iter()
        .flat_map(|v| &v.entries)
        .map(|t| match *t {
            ptemu::machine::Transfer::Async { vector, from, .. }
            | ptemu::machine::Transfer::SoftInt { vector, from } => (vector, from),
            other => panic!("{other:?}"),
        })
        .collect();
    let mut delivered = qemu_entries(&std::fs::read_to_string(&log).unwrap());
    found.sort_unstable();
    delivered.sort_unstable();
    assert!(delivered.len() > 500, "{} entries in QEMU's log", delivered.len());
    assert_eq!(found.len(), delivered.len());
    assert!(found == delivered, "the entries differ from QEMU's log");
    assert!(flow.vcpus.iter().all(|v| v.unexplained == 0), "{:?}", flow.vcpus);
    assert!(
        flow.vcpus.iter().all(|v| v.far > 100 && v.cr3_values > 10),
        "{:?}",
        flow.vcpus
    );
}

/// The counts of tests/data/qemu/count_insns.c's file: instructions, MOVs to CR3 and SYSCALLs
/// reached.
fn counted(path: &std::path::Path) -> (u64, u64, u64) {
    let text = std::fs::read_to_string(path).unwrap();
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {text:?}"))
            .trim()
            .parse()
            .unwrap()
    };
    (
        field("count_insns: "),
        field("count_mov_cr3: "),
        field("count_syscall: "),
    )
}

/// The counting plugin of the tests, built into `dir`.
fn counter(dir: &std::path::Path) -> std::path::PathBuf {
    let so = dir.join("count_insns.so");
    let o = Command::new("gcc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/qemu/count_insns.c"
        ))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    so
}

/// `ptemu boot --kernel KERNEL --initrd INITRD --plugin (ours) --out OUT ARGS -- QEMU`.
fn ptemu_boot(
    out: &std::path::Path,
    kernel: &std::path::Path,
    initrd: &std::path::Path,
    args: &[&str],
    qemu: &[&std::ffi::OsStr],
) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ptemu"))
        .args(["boot", "--out"])
        .arg(out)
        .arg("--kernel")
        .arg(kernel)
        .arg("--initrd")
        .arg(initrd)
        .arg("--plugin")
        .arg(plugin())
        .args(args)
        .arg("--")
        .args(qemu)
        .output()
        .unwrap()
}

/// QE27, QE28, QE29, QE30: `ptemu boot` of the PVH kernel with two vCPUs, traced from each
/// vCPU's first user block: each vCPU is a case, `DIR/cpu<N>/`, that libipt decodes with no
/// error over DIR/code/ (kernel code for every CR3, user code per CR3) and that `ptemu verify`
/// accepts. In the same QEMU run an independent plugin (tests/data/qemu/count_insns.c) counts
/// every instruction, MOV to CR3 and SYSCALL reached: the truths' instructions plus what ran
/// before tracing started (ptemu's count of it), the faulting instructions and the REP
/// iterations that retire no instruction of their own equal its count, up to one store run
/// again a split into a one-store block and one last instruction a vCPU (whose successor no
/// block tells); the MOVs to CR3 traced plus those before equal its count, and libipt's PIP
/// (paging) events equal the MOVs traced; the SYSCALLs equal its count; every interrupt libipt
/// decodes is one QEMU's `-d int` log lists (vector aside: compared by the frame's RIP, as a
/// multiset), and as many as ptemu gave. The guest's console is passed through.
#[test]
fn qe27_qe28_qe29_qe30_ptemu_boot_traces_every_vcpu_kernel_and_user() {
    let dir = tempfile::tempdir().unwrap();
    let (guest, initrd) = loop_twice(dir.path(), 1_000_000);
    let kernel = common::boot::pvh_kernel(&guest);
    let counter = counter(dir.path());
    let counted_file = dir.path().join("counted.txt");
    let log = dir.path().join("int.log");
    let out = dir.path().join("m");
    let plugin_arg = format!("{},out={}", counter.display(), counted_file.display());
    let o = ptemu_boot(
        &out,
        &kernel,
        &initrd,
        &["--smp", "2", "--trace-from", "user", "--timeout", "900"],
        &[
            "-plugin".as_ref(),
            plugin_arg.as_ref(),
            "-d".as_ref(),
            "int".as_ref(),
            "-D".as_ref(),
            log.as_ref(),
        ],
    );
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{stdout}{stderr}");
    assert_eq!(
        stdout.matches("sum 499999500000").count(),
        2,
        "the console: {stdout}"
    );
    assert!(stderr.contains("ptemu boot: 2 vCPU(s)"), "{stderr}");
    let machine: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("machine.json")).unwrap()).unwrap();
    let vcpus = machine["vcpus"].as_array().unwrap();
    assert_eq!(vcpus.len(), 2);
    let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}: {v}"));
    let (count, count_cr3, count_syscalls) = counted(&counted_file);
    let (mut reached, mut slack, mut cr3, mut syscalls) = (0, 0, 0, 0);
    let mut decoded_interrupts = Vec::new();
    for v in vcpus {
        let case = out.join(v["dir"].as_str().unwrap());
        let lines = common::qemu::check_libipt(&case);
        let paging = lines.lines().filter(|l| l.starts_with("[paging")).count() as u64;
        assert_eq!(
            paging,
            n(v, "cr3_writes"),
            "{}: PIP events against MOVs to CR3",
            case.display()
        );
        let interrupts: Vec<u64> = lines
            .lines()
            .filter_map(|l| l.strip_prefix("[interrupt, from: "))
            .map(|l| u64::from_str_radix(l.split(',').next().unwrap(), 16).unwrap())
            .collect();
        assert_eq!(
            interrupts.len() as u64,
            n(v, "asynchronous"),
            "{}",
            case.display()
        );
        assert!(n(v, "instructions") > 1_000_000, "{v}");
        decoded_interrupts.extend(interrupts);
        reached += n(v, "instructions")
            + n(v, "untraced_instructions")
            + n(v, "traced_faults")
            + n(v, "rep_iterations");
        slack += n(v, "store_restarts") + 1;
        cr3 += n(v, "cr3_writes") + n(v, "untraced_cr3_writes");
        syscalls += n(v, "syscalls");
    }
    eprintln!("qe27: {reached} instructions reached ({count} counted), {cr3} MOVs to CR3 ({count_cr3}), {syscalls} SYSCALLs ({count_syscalls}); {machine}");
    assert!(
        reached <= count && count - reached <= slack,
        "instructions: ptemu {reached}, the counting plugin {count} (slack {slack})"
    );
    assert_eq!(cr3, count_cr3, "MOVs to CR3");
    assert_eq!(syscalls, count_syscalls, "SYSCALLs");
    assert!(syscalls > 20 && !decoded_interrupts.is_empty());
    let mut logged: Vec<u64> = qemu_entries(&std::fs::read_to_string(&log).unwrap())
        .into_iter()
        .map(|(_, from)| from)
        .collect();
    logged.sort_unstable();
    decoded_interrupts.sort_unstable();
    let mut rest = logged.as_slice();
    for ip in &decoded_interrupts {
        let k = rest.iter().position(|l| l == ip).unwrap_or_else(|| {
            panic!("libipt's interrupt from {ip:#x} is not in QEMU's log (or more often)")
        });
        rest = &rest[k + 1..];
    }
    assert!(n(&machine["code"], "files") > 2, "{machine}");
}

/// QE27, QE28: the CPL filters on a machine. With User only (OS=0) a trace holds no PIP (the
/// SDM sends PIP only with OS=1), so a decoder cannot tell address spaces apart: DIR/code/ is
/// then one space for all code, and libipt decodes each vCPU with no error over it; with OS
/// only (User=0) the kernel's code alone is traced, TIP.PGD/TIP.PGE where it leaves for user
/// code and comes back. `ptemu verify` accepts both.
#[test]
fn qe27_qe28_the_cpl_filters_cut_a_machines_trace_where_the_sdm_says() {
    let dir = tempfile::tempdir().unwrap();
    let guest = common::boot::guest();
    let kernel = common::boot::pvh_kernel(&guest);
    let initrd = common::boot::initramfs(
        dir.path(),
        &guest,
        "/bin/busybox mount -t proc proc /proc\n/bin/busybox ls /proc > /dev/null\n/bin/busybox poweroff -f\n",
        &[],
    );
    for (ctl, spaces_one) in [("OS=0", true), ("User=0", false)] {
        let out = dir.path().join(ctl);
        let o = ptemu_boot(
            &out,
            &kernel,
            &initrd,
            &[
                "-q",
                "--smp",
                "2",
                "--trace-from",
                "user",
                "--timeout",
                "900",
                "--ctl",
                ctl,
            ],
            &[],
        );
        assert!(
            o.status.success(),
            "{ctl}: {}{}",
            text(&o.stdout),
            text(&o.stderr)
        );
        let machine: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("machine.json")).unwrap()).unwrap();
        assert_eq!(machine["code"]["spaces"] == 1, spaces_one, "{ctl}: {machine}");
        for k in 0..2 {
            let case = out.join(format!("cpu{k}"));
            let lines = common::qemu::check_libipt(&case);
            let kernel_ips = lines.lines().filter(|l| l.starts_with("0xffff")).count();
            let user_ips = lines
                .lines()
                .filter(|l| l.starts_with("0x") && !l.starts_with("0xffff"))
                .count();
            match ctl {
                "OS=0" => assert_eq!(kernel_ips, 0, "{ctl}"),
                _ => assert_eq!(user_ips, 0, "{ctl}"),
            }
        }
    }
}

/// QE30: a guest whose kernel panics (here its init exits: "Attempted to kill init!") is
/// exit 3 with its trace kept; a guest still running at `--timeout` is exit 4, QEMU killed,
/// and DIR not written.
#[test]
fn qe30_a_panic_and_a_timeout_have_exit_codes_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let guest = common::boot::guest();
    let kernel = common::boot::pvh_kernel(&guest);
    let initrd = common::boot::initramfs(dir.path(), &guest, "/bin/busybox true\n", &[]);
    let boot = |out: &std::path::Path, timeout: &str| {
        ptemu_boot(
            out,
            &kernel,
            &initrd,
            &["-q", "--trace-from", "user", "--timeout", timeout],
            &[],
        )
    };
    let out = dir.path().join("panic");
    let o = boot(&out, "900");
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(3), "{stdout}{stderr}");
    assert!(stdout.contains("Kernel panic - not syncing"), "{stdout}");
    assert!(stderr.contains("panicked"), "{stderr}");
    assert!(out.join("cpu0/trace.pt").is_file() && out.join("machine.json").is_file());
    let out = dir.path().join("late");
    let o = boot(&out, "1");
    assert_eq!(o.status.code(), Some(4), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("time limit"), "{}", text(&o.stderr));
    assert!(!out.join("machine.json").exists());
}
