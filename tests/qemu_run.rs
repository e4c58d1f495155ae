//! `ptemu run` on real programs under qemu-x86_64 (spec/qemu.md): the program's own output and
//! status, the truth against QEMU's own log of what it executed, perf and libipt decoding the
//! trace against the real files, and the refusals. Needs Debian's qemu-user and linux-perf
//! (`cargo xtask test` installs both) and gcc for the small C programs of the refusals.

mod common;

use common::cli::{s, text};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::harness as libipt_decode;

use common::qemu::{c_program, data_program, env, plugin, which};

fn feed(mut cmd: Command, stdin: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut w = child.stdin.take().unwrap();
    let body = stdin.to_vec();
    let t = std::thread::spawn(move || {
        let _ = w.write_all(&body);
    });
    let out = child.wait_with_output().unwrap();
    t.join().unwrap();
    out
}

/// `ptemu run EXTRA --out OUT -- PROGRAM...` with `stdin`.
fn ptemu_run(out: &Path, extra: &[&str], program: &[&str], stdin: &[u8]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptemu"));
    env(&mut cmd)
        .arg("run")
        .args(["--plugin", s(&plugin()), "-q", "--out", s(out)])
        .args(extra)
        .arg("--")
        .args(program);
    feed(cmd, stdin)
}

fn native(program: &[&str], stdin: &[u8]) -> Output {
    let mut cmd = Command::new(which(program[0]));
    env(&mut cmd).arg0(program[0]).args(&program[1..]);
    feed(cmd, stdin)
}

use std::os::unix::process::CommandExt;

/// QEMU's own account of what it executed, without the plugin: one instruction a block
/// (`-singlestep`), every block's execution logged (`-d nochain,exec`); the addresses in order,
/// consecutive repeats folded (QEMU runs a REP string instruction once an iteration).
fn qemu_executed(program: &[&str], stdin: &[u8]) -> Vec<u64> {
    let mut cmd = Command::new("qemu-x86_64");
    env(&mut cmd)
        .args([
            "-singlestep",
            "-d",
            "nochain,exec",
            "-D",
            "/dev/stderr",
            "-0",
            program[0],
        ])
        .arg(which(program[0]))
        .args(&program[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // stdout a pipe as in the other runs (a program may look at what its output is).
    let mut child = cmd.spawn().expect("qemu-x86_64 (Debian's qemu-user)");
    let mut stdout = child.stdout.take().unwrap();
    let drain = std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let mut w = child.stdin.take().unwrap();
    let body = stdin.to_vec();
    let t = std::thread::spawn(move || {
        let _ = w.write_all(&body);
    });
    let mut ips = Vec::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        // Trace 0: 0x7f81b4000100 [0000000000000000/0000004002825b70/1040c0b3/00000201]
        let Some(rest) = line.strip_prefix("Trace ") else {
            continue;
        };
        let pc = rest.split('/').nth(1).expect("QEMU's exec log line");
        let pc = u64::from_str_radix(pc, 16).unwrap();
        if ips.last() != Some(&pc) {
            ips.push(pc);
        }
    }
    child.wait().unwrap();
    t.join().unwrap();
    drain.join().unwrap().unwrap();
    ips
}

/// The truth's instruction addresses, in order, consecutive repeats folded as in
/// [`qemu_executed`].
fn truth_ips(case: &Path) -> Vec<u64> {
    let text = common::cli::truth_jsonl(case);
    let mut ips = Vec::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["k"] == "insn" {
            let ip = u64::from_str_radix(v["ip"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
            if ips.last() != Some(&ip) {
                ips.push(ip);
            }
        }
    }
    ips
}

fn verify(case: &Path, lines: &[u8]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptemu"));
    cmd.args(["verify", s(case), "--ips", "-"]);
    feed(cmd, lines)
}

fn report(case: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(case.join("report.json")).unwrap()).unwrap()
}

/// Everything QE1-QE3, QE6 and QE12 promise, for one program.
fn check_program(root: &Path, name: &str, program: &[&str], stdin: &[u8]) {
    let case = root.join(name);
    let traced = ptemu_run(&case, &["--perf-data"], program, stdin);
    let plain = native(program, stdin);
    assert_eq!(
        traced.status.code(),
        plain.status.code(),
        "{name}: {}",
        text(&traced.stderr)
    );
    assert!(
        traced.stdout == plain.stdout,
        "{name}: the output differs from the native run's"
    );
    assert_eq!(text(&traced.stderr), text(&plain.stderr), "{name}");

    // The truth lists exactly what QEMU executed (its own log, not the plugin's).
    let want = qemu_executed(program, stdin);
    let got = truth_ips(&case);
    assert!(want.len() > 10_000, "{name}: {} instructions", want.len());
    if let Some(k) = (0..want.len().min(got.len())).find(|&k| want[k] != got[k]) {
        panic!(
            "{name}: instruction {k}: QEMU ran {:#x}, the truth says {:#x}",
            want[k], got[k]
        );
    }
    assert_eq!(got.len(), want.len(), "{name}: instructions");
    let r = report(&case);
    assert_eq!(r["program"]["exit_status"], plain.status.code().unwrap());
    // QE6: each system call leaves tracing (the last one, exit_group, for good) and comes back.
    let truth = common::cli::truth_jsonl(&case);
    let calls = r["input"]["counts"]["system_calls"].as_u64().unwrap();
    let facts = |k: &str| truth.matches(&format!("\"k\":\"{k}\"")).count() as u64;
    assert!(calls > 5, "{name}: {calls} system calls");
    assert_eq!(
        (facts("disable"), facts("enable")),
        (calls, calls),
        "{name}: disables, enables"
    );
    let maps = r["program"]["maps"].as_array().unwrap();
    assert!(
        maps.iter()
            .any(|m| m["path"].as_str().unwrap().contains("ld-linux-x86-64")),
        "{maps:?}"
    );

    // perf decodes the trace against the real files, without an error, and verify agrees.
    let perf = Command::new("perf")
        .args(["script", "-i"])
        .arg(case.join("perf.data"))
        .args(["--itrace=i0nse", "-F", "ip"])
        .output()
        .expect("perf (Debian's linux-perf)");
    assert!(perf.status.success(), "{name}: perf: {}", text(&perf.stderr));
    let lines = text(&perf.stdout);
    assert!(
        !lines.contains("error"),
        "{name}: perf: {}",
        lines.lines().find(|l| l.contains("error")).unwrap()
    );
    let v = verify(&case, &perf.stdout);
    assert!(v.status.success(), "{name}: verify of perf: {}", text(&v.stdout));
    // perf names the program's own symbols.
    let syms = Command::new("perf")
        .args(["script", "-i"])
        .arg(case.join("perf.data"))
        .args(["--itrace=i0nse", "-F", "ip,sym"])
        .output()
        .unwrap();
    let syms = text(&syms.stdout);
    assert!(
        syms.contains("_dl_start") && syms.contains("__libc_start_main"),
        "{name}: symbols"
    );

    // libipt's instruction decoder over the same files.
    let libipt = libipt_decode::decode_case(&case);
    assert!(
        !libipt.contains("error"),
        "{name}: libipt: {}",
        libipt.lines().find(|l| l.contains("error")).unwrap()
    );
    let v = verify(&case, libipt.as_bytes());
    assert!(
        v.status.success(),
        "{name}: verify of libipt: {}",
        text(&v.stdout)
    );
}

/// Some kilobytes of text lines, the same each time.
fn words(lines: usize) -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut out = String::new();
    for _ in 0..lines {
        for _ in 0..6 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out.push_str(
                ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"][(x % 8) as usize],
            );
            out.push(' ');
        }
        out.push('\n');
    }
    out.into_bytes()
}

#[test]
fn qe1_qe3_qe6_qe12_real_programs_trace_exactly_what_qemu_executed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let data = root.join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("words.txt"), words(100)).unwrap();
    std::fs::write(data.join("few.txt"), words(30)).unwrap();
    std::fs::write(data.join("b.txt"), b"b\n").unwrap();
    std::fs::write(data.join("a.txt"), b"a\n").unwrap();
    let words_txt = data.join("words.txt");
    check_program(root, "true", &["true"], b"");
    check_program(root, "ls", &["ls", "-l", s(&data)], b"");
    check_program(root, "gzip", &["gzip", "-c", "-n", s(&words_txt)], b"");
    check_program(root, "sort", &["sort"], &words(300));
    check_program(root, "sed", &["sed", "s/a/A/g", s(&data.join("few.txt"))], b"");
}

/// QE6 (issue 54 §2): one instruction count means one thing: the summary's count of the
/// program's instructions is report.json's `input.counts.instructions` and the truth's, what a
/// decoder gives; the events the model adds around system calls (the kernel's SYSRET) are
/// counted apart, and the tracer's total is their sum (before, the summary gave the total as
/// the instructions).
#[test]
fn qe6_the_summary_counts_the_programs_instructions_as_the_truth_does() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ls");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptemu"));
    env(&mut cmd)
        .arg("run")
        .args(["--plugin", s(&plugin()), "--out", s(&out)])
        .args(["--", "ls", "/"]);
    let o = feed(cmd, b"");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let said = text(&o.stderr);
    let r = report(&out);
    let program = r["input"]["counts"]["instructions"].as_u64().unwrap();
    let total = r["stats"]["instructions"].as_u64().unwrap();
    let calls = r["input"]["counts"]["system_calls"].as_u64().unwrap();
    assert_eq!(truth_ips(&out).len() as u64, program);
    // The SYSRET of each system call but the last, exit_group, which never returns.
    assert_eq!(total - program, calls - 1, "the SYSRET of each system call");
    assert!(
        said.contains(&format!(
            "{program} instructions of the program; the tracer also stepped {} ",
            calls - 1
        )) && said.contains(&format!("{total} in all"))
            && said.contains(&format!(
                "truth.bin     {program} instructions: {program} required"
            )),
        "{said}"
    );
}

/// Issue 54 §8: on a terminal, a run that takes more than a second and whose output goes
/// elsewhere says on stderr how far it is (block executions traced), and the line is gone
/// before the summary; through a pipe, or with the program writing to the terminal too,
/// nothing of it shows.
#[test]
fn qe11_a_long_run_on_a_terminal_says_how_far_it_is() {
    let dir = tempfile::tempdir().unwrap();
    // Bytes gzip cannot do much with (an LCG's, in hex): a second or more under ptemu.
    let mut x = 1u64;
    let noise: String = (0..1_000_000)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            format!("{:02x}", (x >> 56) as u8)
        })
        .collect();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, noise).unwrap();
    let out = dir.path().join("gz");
    let command = format!(
        "{} run --plugin {} --no-truth --out {} -- gzip -c {} > /dev/null",
        env!("CARGO_BIN_EXE_ptemu"),
        s(&plugin()),
        s(&out),
        s(&input)
    );
    // util-linux's `script` gives the command a terminal; what it wrote there comes to stdout.
    let o = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
        .expect("util-linux's script");
    let shown = text(&o.stdout);
    assert!(o.status.success(), "{shown}");
    let at = shown.find("block executions traced").expect("the progress line");
    let summary = shown.find("ptemu run: gzip").expect("the summary");
    assert!(at < summary, "{shown}");
    // Through a pipe: the summary alone.
    let piped = ptemu_run(&dir.path().join("gz2"), &[], &["gzip", "-c", s(&input)], b"");
    assert!(!text(&piped.stderr).contains("block executions traced"));
    // The program's output on the terminal too: no line redrawn among its lines.
    let on_terminal = format!(
        "{} run --plugin {} --no-truth --out {} -- gzip -cf {}",
        env!("CARGO_BIN_EXE_ptemu"),
        s(&plugin()),
        s(&dir.path().join("gz3")),
        s(&input)
    );
    let o = Command::new("script")
        .args(["-qec", &on_terminal, "/dev/null"])
        .output()
        .expect("util-linux's script");
    let shown = String::from_utf8_lossy(&o.stdout);
    assert!(shown.contains("ptemu run: gzip"), "the summary");
    assert!(!shown.contains("block executions traced"));
}

#[test]
fn qe6_os_tracing_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let o = ptemu_run(&out, &["--ctl", "OS=1"], &["true"], b"");
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("OS=1"), "{}", text(&o.stderr));
    assert!(!out.exists());
}

#[test]
fn qe11_the_exit_status_is_the_programs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let o = ptemu_run(&out, &[], &["sh", "-c", "echo hi; exit 3"], b"");
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(text(&o.stdout), "hi\n");
    assert_eq!(report(&out)["program"]["exit_status"], 3);
    // A program killed by a signal: 128 + N, as a shell says; the trace ends at the kill, the
    // SYSCALL that sent it (QE7).
    let o = ptemu_run(&out, &[], &["sh", "-c", "kill -TERM $$"], b"");
    assert_eq!(o.status.code(), Some(128 + 15), "{}", text(&o.stderr));
    let r = report(&out);
    assert_eq!(r["program"]["signal"], 15);
    assert_eq!(r["program"]["exited"], false);
    let truth = common::cli::truth_jsonl(&out);
    let last = truth
        .lines()
        .rev()
        .find(|l| l.contains("\"k\":\"insn\""))
        .unwrap();
    let ip = u64::from_str_radix(
        last.split("\"ip\":\"0x")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap(),
        16,
    )
    .unwrap();
    let map = r["program"]["maps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| {
            let h =
                |k: &str| u64::from_str_radix(m[k].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
            h("start") <= ip && ip < h("end")
        })
        .expect("the last instruction lies in a mapped file");
    let h = |k: &str| u64::from_str_radix(map[k].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    let code = std::fs::read(map["path"].as_str().unwrap()).unwrap();
    let at = (h("offset") + ip - h("start")) as usize;
    assert_eq!(&code[at..at + 2], &[0x0f, 0x05], "the trace ends at a SYSCALL");
    let v = verify(&out, libipt_decode::decode_case(&out).as_bytes());
    assert!(v.status.success(), "{}", text(&v.stdout));
    // A `#!` script runs as the kernel runs it: its interpreter, with the script.
    let script = out.parent().unwrap().join("s.sh");
    std::fs::write(&script, "#!/bin/sh\necho script \"$1\"\nexit 4\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let o = ptemu_run(&out, &[], &[s(&script), "arg"], b"");
    assert_eq!(
        (o.status.code(), text(&o.stdout)),
        (Some(4), "script arg\n".into()),
        "{}",
        text(&o.stderr)
    );
    // stdin reaches the program.
    let o = ptemu_run(&out, &[], &["cat"], b"through\n");
    assert_eq!((o.status.code(), text(&o.stdout)), (Some(0), "through\n".into()));
}

#[test]
fn qe11_a_missing_program_qemu_or_plugin_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let o = ptemu_run(&out, &[], &["no-such-program-here"], b"");
    assert_eq!(o.status.code(), Some(127));
    assert!(
        text(&o.stderr).contains("no-such-program-here: command not found"),
        "{}",
        text(&o.stderr)
    );
    let plain = dir.path().join("plain.txt");
    std::fs::write(&plain, b"not a program\n").unwrap();
    let o = ptemu_run(&out, &[], &[s(&plain)], b"");
    assert_eq!(o.status.code(), Some(126));
    assert!(
        text(&o.stderr).contains("Permission denied"),
        "{}",
        text(&o.stderr)
    );
    let o = ptemu_run(&out, &[], &["/tmp"], b"");
    assert_eq!(o.status.code(), Some(126));
    assert!(!out.exists());
    // DIR cannot be made: exit 2 before the program runs at all.
    let o = ptemu_run(
        Path::new("/proc/no/such/dir"),
        &[],
        &["sh", "-c", "echo RAN"],
        b"",
    );
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(text(&o.stdout), "", "the program ran");

    // No QEMU: the command that installs it.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptemu"));
    cmd.env_clear().env("PATH", dir.path()).args([
        "run",
        "--plugin",
        s(&plugin()),
        "--out",
        s(&out),
        "--",
        "/usr/bin/true",
    ]);
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("apt-get install qemu-user"),
        "{}",
        text(&o.stderr)
    );
    // No plugin where it is looked for: the command that builds it.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptemu"));
    env(&mut cmd)
        .env("PTEMU_QEMU_PLUGIN", dir.path().join("none.so"))
        .args(["run", "--out", s(&out), "--", "true"]);
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("PTEMU_QEMU_PLUGIN"),
        "{}",
        text(&o.stderr)
    );
    let exe_dir = dir.path().join("bin");
    std::fs::create_dir(&exe_dir).unwrap();
    let lone = exe_dir.join("ptemu");
    std::fs::copy(env!("CARGO_BIN_EXE_ptemu"), &lone).unwrap();
    let mut cmd = Command::new(&lone);
    env(&mut cmd).args(["run", "--out", s(&out), "--", "true"]);
    let o = output_of_fresh_copy(&mut cmd);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("cargo build --release -p ptemu-qemu"),
        "{}",
        text(&o.stderr)
    );
    // Next to the executable, it is found without naming it.
    std::fs::copy(plugin(), exe_dir.join("libptemu_qemu.so")).unwrap();
    let o = output_of_fresh_copy(&mut cmd);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    // QEMU that does not load the plugin: both versions named.
    let bad = dir.path().join("bad.so");
    std::fs::write(&bad, b"not a library").unwrap();
    std::fs::remove_dir_all(&out).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptemu"));
    env(&mut cmd).args(["run", "--plugin", s(&bad), "--out", s(&out), "--", "true"]);
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = text(&o.stderr);
    assert!(
        e.contains("did not load the plugin")
            && e.contains("plugin API version 1")
            && e.contains("version 7."),
        "{e}"
    );
    assert!(!out.exists());
}

#[test]
fn qe10_qe16_what_cannot_be_traced_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // A SIGSEGV that another process sends while the program computes, to an SA_SIGINFO
    // handler: the signal frame says so (si_code SI_USER), so it is no fault of the block that
    // ran last, and a fault signal's handler reached between blocks is refused (QE16, QE21).
    let sent = c_program(
        dir.path(),
        "sent",
        "#include <setjmp.h>\n#include <signal.h>\n#include <stdio.h>\n#include <string.h>\n#include <unistd.h>\n\
         static sigjmp_buf env;\nstatic void h(int s, siginfo_t *i, void *c) { siglongjmp(env, s); }\n\
         int main(void) { struct sigaction sa; memset(&sa, 0, sizeof sa); sa.sa_sigaction = h; sa.sa_flags = SA_SIGINFO;\n\
         sigaction(SIGSEGV, &sa, 0); pid_t me = getpid(); volatile long n = 0;\n\
         if (!sigsetjmp(env, 1)) { if (fork() == 0) { usleep(300000); kill(me, SIGSEGV); _exit(0); } for (;;) n++; }\n\
         puts(\"sent\"); return 0; }\n",
    );
    // Killed by SIGKILL while it computes, which no code of QEMU's sees: the end is unknown
    // (QE7; a fault or a signal QEMU handles is traced to where it stopped the program, QE22).
    let crash = c_program(
        dir.path(),
        "crash",
        "#include <signal.h>\n#include <stdio.h>\n#include <unistd.h>\n\
         int main(void) { pid_t me = getpid(); volatile long n = 0; puts(\"ran\"); fflush(stdout);\n\
         if (fork() == 0) { usleep(300000); kill(me, SIGKILL); _exit(0); } for (;;) n++; }\n",
    );
    // Closes every descriptor from 3 up: the plugin's socket with them (QE10).
    let closer = c_program(
        dir.path(),
        "closer",
        "#define _GNU_SOURCE\n#include <stdio.h>\n#include <unistd.h>\n\
         int main(void) { closefrom(3); puts(\"closed\"); return 0; }\n",
    );
    // SIGKILL may also cut the plugin's write of a chunk: then the stream ends inside a record
    // (QE1), refused the same way.
    for (exe, says, prints) in [
        (&sent, &["an instruction raises"][..], "sent\n"),
        (
            &crash,
            &["killed outside a system call", "the stream ends inside a record"],
            "ran\n",
        ),
        (&closer, &["closed the"], "closed\n"),
    ] {
        let out = dir.path().join("o");
        let o = ptemu_run(&out, &[], &[s(exe)], b"");
        let e = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(says.iter().any(|w| e.contains(w)), "{e}");
        // The program still ran to its end; nothing was written.
        assert_eq!(text(&o.stdout), prints);
        assert!(!out.exists());
    }
}

#[test]
fn qe17_code_written_once_is_traced_and_a_rewrite_two_threads_run_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let jit = c_program(
        dir.path(),
        "jit",
        "#include <stdio.h>\n#include <string.h>\n#include <sys/mman.h>\n\
         int main(void) { unsigned char code[] = {0xb8, 42, 0, 0, 0, 0xc3};\n\
         void *p = mmap(0, 4096, PROT_READ|PROT_WRITE|PROT_EXEC, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);\n\
         memcpy(p, code, sizeof code); printf(\"%d\\n\", ((int (*)(void))p)()); return 0; }\n",
    );
    // Written once: one version, mapped from the start; no CYC needed.
    let out = dir.path().join("o");
    let o = ptemu_run(&out, &["--perf-data"], &[s(&jit)], b"");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "42\n");
    let r = report(&out);
    assert_eq!(r["program"]["code"].as_array().unwrap().len(), 1);
    check_decoders(&out, &out.join("perf.data"), 1000);
    // Rewritten while a second thread runs it: each thread's trace keeps its own clock.
    let shared = c_program(
        dir.path(),
        "shared",
        "#include <pthread.h>\n#include <stdio.h>\n#include <string.h>\n#include <sys/mman.h>\n\
         static unsigned char *p;\nstatic void *f(void *a) { return (void *)(long)((int (*)(void))p)(); }\n\
         int main(void) { unsigned char code[] = {0xb8, 42, 0, 0, 0, 0xc3}; pthread_t t; void *r1, *r2;\n\
         p = mmap(0, 4096, PROT_READ|PROT_WRITE|PROT_EXEC, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);\n\
         memcpy(p, code, sizeof code); pthread_create(&t, 0, f, 0); pthread_join(t, &r1);\n\
         code[1] = 43; memcpy(p, code, sizeof code); r2 = (void *)(long)((int (*)(void))p)();\n\
         printf(\"%ld %ld\\n\", (long)r1, (long)r2); return 0; }\n",
    );
    let out = dir.path().join("o2");
    let o = ptemu_run(&out, &[], &[s(&shared)], b"");
    let e = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("rewrote its code") && e.contains("QE17"), "{e}");
    assert_eq!(text(&o.stdout), "42 43\n");
    assert!(!out.exists());
}

/// QE17's bound: a trace keeps at most 4,096 versions of written code. A program that rewrites
/// a page N times is traced with its N versions below the bound and refused (exit 2, nothing
/// written, the program run to its end) above it, where it was 5,001 files in code/ and as many
/// pages held in memory.
#[test]
fn qe17_a_program_rewriting_code_past_the_bound_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let rewrite = c_program(
        dir.path(),
        "rewrite",
        "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <sys/mman.h>\n\
         int main(int c, char **v) { int n = atoi(v[1]); long sum = 0;\n\
         unsigned char code[] = {0xb8, 0, 0, 0, 0, 0xc3};\n\
         unsigned char *p = mmap(0, 4096, PROT_READ|PROT_WRITE|PROT_EXEC, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);\n\
         for (int i = 0; i < n; i++) { memcpy(code + 1, &i, 4); memcpy(p, code, sizeof code);\n\
         sum += ((int (*)(void))p)(); }\n\
         printf(\"%ld\\n\", sum); return 0; }\n",
    );
    let out = dir.path().join("o");
    let o = ptemu_run(&out, &[], &[s(&rewrite), "100"], b"");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "4950\n");
    let code = report(&out)["program"]["code"].as_array().unwrap().len();
    assert_eq!(code, 100, "one version a rewrite");
    assert_eq!(std::fs::read_dir(out.join("code")).unwrap().count(), 100);
    let out = dir.path().join("o2");
    let o = ptemu_run(&out, &[], &[s(&rewrite), "5000"], b"");
    let e = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("more than 4096 times") && e.contains("QE17"), "{e}");
    assert_eq!(text(&o.stdout), "12497500\n");
    assert!(!out.exists());
}

#[test]
fn qe8_qe9_qe18_forked_children_are_processes_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let exe = data_program(dir.path(), "fork", &["-no-pie"]);
    let out = dir.path().join("o");
    let o = ptemu_run(&out, &["--perf-data"], &[s(&exe)], b"");
    let native = native(&[s(&exe)], b"");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), text(&native.stdout));
    let r = report(&out);
    let procs = r["program"]["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 2, "{r}");
    assert_eq!(r["program"]["forks_not_traced"].as_array().unwrap().len(), 0);
    let (child, grandchild) = (&procs[0], &procs[1]);
    assert_eq!(grandchild["parent"], child["pid"]);
    // Each process is a run of its own: perf and libipt decode it, and verify accepts both.
    let mut cases = vec![out.clone()];
    cases.extend(procs.iter().map(|p| out.join(p["case"].as_str().unwrap())));
    for case in &cases {
        let r = report(case);
        assert!(
            r["input"]["counts"]["instructions"].as_u64().unwrap() > 1000,
            "{}",
            case.display()
        );
        check_decoders(case, &case.join("perf.data"), 1000);
    }
    // The child exited (status 3, which the parent printed); the grandchild exec'd echo, where
    // its trace ends (QE9).
    let (c, g) = (report(&cases[1]), report(&cases[2]));
    assert_eq!(c["program"]["exited"], true, "{c}");
    assert_eq!(g["program"]["exited"], false, "{g}");
    assert_eq!(g["program"]["execs"][0], "/usr/bin/echo");
    // The summary lists them, on stderr: stdout is the program's alone.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptemu"));
    env(&mut cmd)
        .args(["run", "--plugin", s(&plugin()), "--out", s(&out), "--"])
        .arg(&exe);
    let o = cmd.output().unwrap();
    let e = text(&o.stderr);
    assert!(e.contains("processes: 2 forked child process(es)"), "{e}");
    assert_eq!(text(&o.stdout), text(&native.stdout));
    // execve replaces the program: the trace ends at the SYSCALL, and says so.
    let o = ptemu_run(&out, &[], &["sh", "-c", "exec /usr/bin/echo replaced"], b"");
    assert_eq!((o.status.code(), text(&o.stdout)), (Some(0), "replaced\n".into()));
    let r = report(&out);
    assert_eq!(r["program"]["exited"], false, "{r}");
    assert_eq!(r["program"]["execs"][0], "/usr/bin/echo");
    let v = verify(&out, libipt_decode::decode_case(&out).as_bytes());
    assert!(v.status.success(), "{}", text(&v.stdout));
    // No processes/ left from the run before.
    assert!(!out.join("processes").exists());
}

/// `--fault`, `--layout`, `--cpu` and `--ctl` mean for `run` what they mean for `simulate`:
/// libipt's decoder gives what the truth requires under each.
#[test]
fn qe11_run_options_mean_what_they_mean_for_simulate() {
    let dir = tempfile::tempdir().unwrap();
    let ring = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/ring-layout.toml");
    let settings: [&[&str]; 5] = [
        &["--fault", "corrupt"],
        &["--fault", "wrap@4096"],
        &["--fault", "ovf"],
        &["--layout", s(&ring), "--cpu", "skylake"],
        &["--ctl", "DisRETC=1", "--ctl", "PSBFreq=1", "--cpu", "icelake"],
    ];
    for extra in settings {
        let out = dir.path().join("o");
        let o = ptemu_run(&out, extra, &["true"], b"");
        assert_eq!(o.status.code(), Some(0), "{extra:?}: {}", text(&o.stderr));
        let v = verify(&out, libipt_decode::decode_case(&out).as_bytes());
        assert!(v.status.success(), "{extra:?}: {}", text(&v.stdout));
        let r = report(&out);
        assert_eq!(r["input"]["format"], "qemu", "{extra:?}");
    }
}

/// QEMU's own account of one run, by vCPU (each thread has its own): every block execution
/// QEMU logged, each as the instructions of that block as QEMU logged translating it.
type BlockLog = Vec<Vec<Vec<u64>>>;

/// `ptemu run` of `program` with QEMU logging, in the same run, every block it translates with
/// its instructions (`in_asm`) and every block it runs (`nochain,exec`): `QEMU_LOG`, which
/// qemu-x86_64 reads from its environment. The plugin sees the blocks QEMU really makes (no
/// single-stepping), and the log does not come from the plugin.
fn run_logged(dir: &Path, out: &Path, extra: &[&str], program: &[&str]) -> (Output, BlockLog) {
    let log = dir.join("qemu.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptemu"));
    env(&mut cmd)
        .env("QEMU_LOG", "nochain,exec,in_asm")
        .env("QEMU_LOG_FILENAME", &log)
        .arg("run")
        .args(["--plugin", s(&plugin()), "-q", "--out", s(out)])
        .args(extra)
        .arg("--")
        .args(program);
    let o = feed(cmd, b"");
    let mut blocks: std::collections::HashMap<u64, Vec<u64>> = std::collections::HashMap::new();
    let mut listing: Option<Vec<u64>> = None;
    let mut cpus: BlockLog = Vec::new();
    // Every block execution logged, in the log's order: (vCPU, its index there).
    let mut order: Vec<(usize, usize)> = Vec::new();
    for line in BufReader::new(std::fs::File::open(&log).unwrap()).lines() {
        let line = line.unwrap();
        if line.starts_with("IN:") {
            listing = Some(Vec::new());
            continue;
        }
        if let Some(l) = listing.as_mut() {
            // 0x4002821770:  55   pushq %rbp; the bytes of a long instruction go on over a
            // line of bytes alone, which starts no instruction.
            if let Some((addr, rest)) = line.strip_prefix("0x").and_then(|r| r.split_once(':')) {
                let bytes_only = rest
                    .split_whitespace()
                    .all(|t| t.len() == 2 && t.bytes().all(|b| b.is_ascii_hexdigit()));
                if !bytes_only {
                    l.push(u64::from_str_radix(addr, 16).unwrap());
                }
                continue;
            }
            let l = listing.take().unwrap();
            if let Some(&first) = l.first() {
                blocks.insert(first, l);
            }
        }
        // A block QEMU logged and then gave up before its first instruction (a signal or an
        // exit stopped the thread there): the thread's last block at that address did not run.
        // Stopped execution of TB chain before 0x7f1c3c001640 [00000000004011fb] worker
        if let Some(rest) = line.strip_prefix("Stopped execution of TB chain before ") {
            let pc = rest.split('[').nth(1).and_then(|r| r.split(']').next()).unwrap();
            let pc = u64::from_str_radix(pc, 16).unwrap();
            let k = order
                .iter()
                .rposition(|&(cpu, i): &(usize, usize)| cpus[cpu][i].first() == Some(&pc))
                .expect("a block logged before it was stopped");
            let (cpu, i) = order[k];
            cpus[cpu][i].clear();
            continue;
        }
        // Trace 1: 0x7f81b4000100 [0000000000000000/0000004002825b70/1040c0b3/00000201]
        let Some(rest) = line.strip_prefix("Trace ") else {
            continue;
        };
        let cpu: usize = rest.split(':').next().unwrap().parse().unwrap();
        let pc = u64::from_str_radix(rest.split('/').nth(1).unwrap(), 16).unwrap();
        if cpus.len() <= cpu {
            cpus.resize(cpu + 1, Vec::new());
        }
        let block = blocks
            .get(&pc)
            .unwrap_or_else(|| panic!("QEMU ran {pc:#x} before it logged translating it"));
        order.push((cpu, cpus[cpu].len()));
        cpus[cpu].push(block.clone());
    }
    (o, cpus)
}

/// A vCPU's instructions: its blocks one after another (those given up left out), consecutive
/// repeats of an address folded (QEMU runs a REP string instruction once an iteration).
fn instructions(blocks: &[Vec<u64>]) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    for &pc in blocks.iter().flatten() {
        if out.last() != Some(&pc) {
            out.push(pc);
        }
    }
    out
}

/// Every case of a `ptemu run` (DIR and each `threads/<tid>/`), main thread first.
fn thread_cases(out: &Path) -> Vec<PathBuf> {
    let mut cases = vec![out.to_path_buf()];
    let r = report(out);
    for t in r["program"]["threads"].as_array().unwrap() {
        cases.push(out.join(t["case"].as_str().unwrap()));
    }
    cases
}

/// The tid of each of [`thread_cases`], in the same order.
fn case_tids(out: &Path) -> Vec<u64> {
    let r = report(out);
    let threads = r["program"]["threads"].as_array().unwrap();
    std::iter::once(&r["program"])
        .chain(threads)
        .map(|t| t["tid"].as_u64().unwrap())
        .collect()
}

/// Each vCPU QEMU ran is exactly one case's truth, and there is a case for each.
fn assert_each_vcpu_is_a_case(cpus: &BlockLog, cases: &[PathBuf]) {
    let truths: Vec<Vec<u64>> = cases.iter().map(|c| truth_ips(c)).collect();
    assert_eq!(cpus.len(), truths.len(), "vCPUs and cases");
    for (cpu, blocks) in cpus.iter().enumerate() {
        let ran = instructions(blocks);
        assert!(
            truths.contains(&ran),
            "vCPU {cpu}: QEMU ran {} instructions, no case's truth holds them ({:?})",
            ran.len(),
            truths.iter().map(Vec::len).collect::<Vec<_>>()
        );
    }
}

/// QE15 for one case: perf (with the case's own perf.data, or `perf_data` holding every
/// thread's, filtered to the case's tid) and libipt decode it with no error, and `ptemu verify`
/// accepts both.
fn check_decoders(case: &Path, perf_data: &Path, tid: u64) {
    let perf = Command::new("perf")
        .args(["script", "-i"])
        .arg(perf_data)
        .args(["--itrace=i0nse", "-F", "ip", "--tid"])
        .arg(tid.to_string())
        .output()
        .expect("perf (Debian's linux-perf)");
    assert!(
        perf.status.success(),
        "{}: perf: {}",
        case.display(),
        text(&perf.stderr)
    );
    let lines = text(&perf.stdout);
    assert!(!lines.contains("error"), "{}: perf: {lines}", case.display());
    let v = verify(case, &perf.stdout);
    assert!(
        v.status.success(),
        "{}: verify of perf: {}",
        case.display(),
        text(&v.stdout)
    );
    common::qemu::check_libipt(case);
}

/// Two threads besides the main one, alive at once (a barrier: QEMU gives a thread that starts
/// after another ended that one's vCPU index, and QEMU's log tells threads by vCPU).
const THREADS_C: &str = "#include <pthread.h>\n#include <stdio.h>\n\
static pthread_barrier_t b;\n\
static long work(long n) { long s = 0; for (long i = 0; i < n; i++) s += i * (i & 7); return s; }\n\
static void *f(void *a) { pthread_barrier_wait(&b); return (void *)work((long)a); }\n\
int main(void) { pthread_t t[2]; void *r[2]; pthread_barrier_init(&b, 0, 3);\n\
  for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, f, (void *)(long)(10000 * (i + 1)));\n\
  pthread_barrier_wait(&b);\n\
  long m = work(5000);\n\
  for (int i = 0; i < 2; i++) pthread_join(t[i], &r[i]);\n\
  printf(\"%ld %ld %ld\\n\", m, (long)r[0], (long)r[1]); return 0; }\n";

#[test]
fn qe15_pd7_every_thread_is_a_case_that_holds_exactly_what_it_ran() {
    let dir = tempfile::tempdir().unwrap();
    let exe = c_program(dir.path(), "threads", THREADS_C);
    let out = dir.path().join("o");
    let (o, cpus) = run_logged(dir.path(), &out, &["--perf-data"], &[s(&exe)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), text(&native(&[s(&exe)], b"").stdout));
    let cases = thread_cases(&out);
    assert_eq!(cases.len(), 3, "the main thread and two more");
    assert_each_vcpu_is_a_case(&cpus, &cases);
    for (case, tid) in cases.iter().zip(case_tids(&out)) {
        assert_eq!(report(case)["program"]["tid"].as_u64(), Some(tid));
        // One perf.data holds every thread (PD7).
        check_decoders(case, &out.join("perf.data"), tid);
    }
}

/// The address of `symbol` in `exe` (linked with -no-pie: where it runs).
fn symbol(exe: &Path, symbol: &str) -> u64 {
    let o = Command::new("nm").arg(exe).output().expect("nm (binutils)");
    let t = text(&o.stdout);
    let line = t
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some(symbol))
        .unwrap_or_else(|| panic!("{symbol} is not in {}", exe.display()));
    u64::from_str_radix(line.split_whitespace().next().unwrap(), 16).unwrap()
}

/// Issue 41's proof: a program of two threads, a signal handler, and code it writes and
/// rewrites (tests/data/qemu/proof.c), traced with CYC packets (QE17: decoders load each version
/// of the code at the time it was written). Its output is its own; each thread's truth is
/// exactly what QEMU's own log of the same run says the thread executed; perf (one perf.data,
/// each thread by its tid) and libipt decode every thread with no error, and `ptemu verify`
/// accepts both.
#[test]
fn qe15_qe16_qe17_pd8_threads_signals_and_written_code_are_traced_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let exe = data_program(dir.path(), "proof", &["-no-pie"]);
    let handler = symbol(&exe, "on_usr1");
    let out = dir.path().join("o");
    let ips = dir.path().join("interrupted.txt");
    let (o, cpus) = run_logged(
        dir.path(),
        &out,
        &["--perf-data", "--ctl", "CYCEn=1"],
        &[s(&exe), s(&ips)],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), text(&native(&[s(&exe)], b"").stdout));
    assert_eq!(text(&o.stdout), "code: 5050 9900 158400; signals delivered: 4\n");
    let interrupted: Vec<u64> = std::fs::read_to_string(&ips)
        .unwrap()
        .lines()
        .map(|l| u64::from_str_radix(l, 16).unwrap())
        .collect();
    let cases = thread_cases(&out);
    assert_eq!(cases.len(), 2);
    assert_each_vcpu_is_a_case(&cpus, &cases);
    // QE16: the main thread's signal came as its tgkill returned, the worker's three while it
    // computed. QEMU ran the handler once for each; each of the worker's is an interrupt where
    // the program's own signal frame says, and each handler returned.
    let entered = |cpu: usize| instructions(&cpus[cpu]).iter().filter(|&&a| a == handler).count();
    assert_eq!((entered(0), entered(1)), (1, 3));
    let counts = |case: &Path| report(case)["input"]["counts"].clone();
    let (main, worker) = (counts(&cases[0]), counts(&cases[1]));
    assert_eq!(main["signals_delivered"], 1, "{main}");
    assert_eq!(worker["signals_delivered"], 3, "{worker}");
    assert_eq!(worker["sigreturns"], 3, "{worker}");
    let worker = common::cli::truth_jsonl(&cases[1]);
    assert_eq!(interrupted.len(), 4);
    for x in &interrupted[1..] {
        assert!(
            worker.contains(&format!("\"k\":\"async\",\"from\":\"{x:#x}\"")),
            "no interrupt at {x:#x} in the worker's truth"
        );
    }
    // The written page, in its three versions, each a file of code/.
    let r = report(&out);
    let code = r["program"]["code"].as_array().unwrap();
    assert_eq!(code.len(), 3, "{code:?}");
    assert!(code[0]["load_tsc"].is_null() && code[2]["load_tsc"].is_string());
    for c in code {
        assert!(Path::new(c["path"].as_str().unwrap()).is_file(), "{c}");
    }
    for (case, tid) in cases.iter().zip(case_tids(&out)) {
        check_decoders(case, &out.join("perf.data"), tid);
    }
}

/// `cmd.output()` for an executable this process has just copied: while another test thread
/// forks, the child briefly holds the copy's write descriptor, and exec fails with ETXTBSY ("Text
/// file busy") until that child execs; try again for up to 5 s.
fn output_of_fresh_copy(cmd: &mut Command) -> std::process::Output {
    for _ in 0..500 {
        match cmd.output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            r => return r.unwrap(),
        }
    }
    cmd.output().unwrap()
}

/// QE11: `#!` scripts run as the kernel runs them (native execution is the oracle): a line
/// with no newline, an interpreter that is a script itself, and a carriage return that makes
/// the interpreter's name one no file has (the kernel: ENOENT; ptemu: 126, as a shell).
#[test]
fn qe11_scripts_run_as_the_kernel_runs_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let script = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        p
    };
    let inner = script("inner", "#!/bin/echo inner\n");
    let cases = [
        script("no-newline", "#!/bin/echo hello"),
        script("outer", &format!("#!{} outer-arg\n", inner.display())),
    ];
    for p in &cases {
        let native = Command::new(p).arg("a1").env_clear().output().unwrap();
        let o = ptemu_run(&out, &[], &[s(p), "a1"], b"");
        assert_eq!(
            (o.status.code(), text(&o.stdout)),
            (native.status.code(), text(&native.stdout)),
            "{}: {}",
            p.display(),
            text(&o.stderr)
        );
        assert!(out.join("trace.pt").is_file());
    }
    let cr = script("cr", "#!/bin/echo\r\necho no\n");
    let native = Command::new(&cr).output().unwrap_err();
    assert_eq!(native.kind(), std::io::ErrorKind::NotFound);
    let o = ptemu_run(&dir.path().join("cr-out"), &[], &[s(&cr)], b"");
    assert_eq!(o.status.code(), Some(126), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("bad interpreter: No such file or directory"),
        "{}",
        text(&o.stderr)
    );
}

/// QE11: a standard descriptor closed when ptemu starts is closed for the program, as it is
/// natively: `echo hi >&-` fails with a write error, under ptemu run as without it.
#[test]
fn qe11_a_closed_standard_descriptor_stays_closed_for_the_program() {
    let dir = tempfile::tempdir().unwrap();
    let closed = |cmd: &mut Command| {
        // SAFETY: close between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::close(1);
                Ok(())
            });
        }
    };
    let mut native = Command::new("/bin/echo");
    native.arg("hi");
    closed(&mut native);
    let native = native.output().unwrap();
    assert_eq!(native.status.code(), Some(1));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptemu"));
    env(&mut cmd)
        .arg("run")
        .args([
            "--plugin",
            s(&plugin()),
            "-q",
            "--out",
            s(&dir.path().join("out")),
        ])
        .args(["--", "/bin/echo", "hi"]);
    closed(&mut cmd);
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), native.status.code(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("write error"), "{}", text(&o.stderr));
}

/// QE15: a main thread that calls pthread_exit while another thread runs on leaves the plugin
/// its view of the process (the calling thread's): the program is traced to its end, exit 0.
#[test]
fn qe15_a_main_thread_that_calls_pthread_exit_leaves_the_others_traced() {
    let dir = tempfile::tempdir().unwrap();
    let exe = c_program(
        dir.path(),
        "leader-exits",
        "#include <pthread.h>\n#include <stdio.h>\n#include <unistd.h>\n\
         static void *work(void *a) { volatile unsigned long s = 0; usleep(300000);\n\
           for (long i = 0; i < 100000; i++) s += i;\n\
           printf(\"thread done %lu\\n\", s); fflush(stdout); return a; }\n\
         int main(void) { pthread_t t; pthread_create(&t, 0, work, 0); pthread_exit(0); }\n",
    );
    let native = native(&[s(&exe)], b"");
    let out = dir.path().join("out");
    let o = ptemu_run(&out, &[], &[s(&exe)], b"");
    assert_eq!(
        (o.status.code(), text(&o.stdout)),
        (native.status.code(), text(&native.stdout)),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0));
    let threads = report(&out)["program"]["threads"].as_array().unwrap().len();
    assert_eq!(threads, 1, "the other thread is a case of its own");
}

/// QE21's oracle from QEMU's own log: a block that a fault stopped is followed on its vCPU by
/// the first block of a handler (one of `handlers`), and holds one of `faults`, the faulting
/// instructions (the program's own signal frames, and its labels): the instructions from it
/// on did not run.
fn cut_at_faults(cpus: &BlockLog, handlers: &[u64], faults: &[u64]) -> (BlockLog, usize) {
    let mut cut = cpus.clone();
    let mut n = 0;
    for blocks in &mut cut {
        for i in 0..blocks.len().saturating_sub(1) {
            if !blocks[i + 1].first().is_some_and(|h| handlers.contains(h)) {
                continue;
            }
            let k = blocks[i]
                .iter()
                .position(|a| faults.contains(a))
                .unwrap_or_else(|| panic!("the block before a handler holds no fault: {:x?}", blocks[i]));
            blocks[i].truncate(k);
            n += 1;
        }
    }
    (cut, n)
}

/// QE21: faults whose handlers the program installed (tests/data/qemu/faults.c): a NULL load
/// in a loop (SIGSEGV, SA_SIGINFO, siglongjmp out), a division by zero (SIGFPE, a handler
/// without SA_SIGINFO), a load from a page the handler then makes readable (it returns: the
/// load runs again), the NULL load in a second thread, and `ud2` (SIGILL, whose handler exits).
/// Each thread's truth is exactly what QEMU's log of the same run says it executed, with each
/// faulting block stopped at the instruction that faulted (where the program's signal frames
/// and its labels say), and that instruction is where the trace leaves user mode; perf and
/// libipt decode both threads with no error and `ptemu verify` accepts them (the packets
/// there: FUP and TIP.PGD by PGD2/TIP3, TIP.PGE at the handler by PGE1). Two programs of
/// QE16's day, refused then, are traced now: a fault in a block that ends in a RET, to a
/// handler installed with `signal`.
#[test]
fn qe21_a_handled_fault_is_traced_to_the_faulting_instruction() {
    let dir = tempfile::tempdir().unwrap();
    let exe = data_program(dir.path(), "faults", &["-no-pie"]);
    let handlers = [
        symbol(&exe, "on_segv"),
        symbol(&exe, "on_fpe"),
        symbol(&exe, "on_ill"),
    ];
    let (div, ud2) = (symbol(&exe, "fault_div"), symbol(&exe, "fault_ud2"));
    let out = dir.path().join("o");
    let ips = dir.path().join("faulted.txt");
    let (o, cpus) = run_logged(dir.path(), &out, &["--perf-data"], &[s(&exe), s(&ips)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), text(&native(&[s(&exe)], b"").stdout));
    assert_eq!(
        text(&o.stdout),
        "sum -1, quotient -1, guarded 1, worker -1; SIGSEGV faults 3\n"
    );
    let segv: Vec<u64> = std::fs::read_to_string(&ips)
        .unwrap()
        .lines()
        .map(|l| u64::from_str_radix(l, 16).unwrap())
        .collect();
    assert_eq!(segv.len(), 3);
    let faults = [segv[0], segv[1], segv[2], div, ud2];
    let (cut, n) = cut_at_faults(&cpus, &handlers, &faults);
    assert_eq!(n, 5, "faults QEMU's log shows");
    let cases = thread_cases(&out);
    assert_eq!(cases.len(), 2);
    assert_each_vcpu_is_a_case(&cut, &cases);
    let (main, worker) = (
        common::cli::truth_jsonl(&cases[0]),
        common::cli::truth_jsonl(&cases[1]),
    );
    for (truth, at) in [
        (&main, segv[0]),
        (&main, div),
        (&main, segv[1]),
        (&main, ud2),
        (&worker, segv[2]),
    ] {
        assert!(
            truth.contains(&format!("\"k\":\"async\",\"from\":\"{at:#x}\"")),
            "no fault at {at:#x} in the truth"
        );
    }
    for (case, tid) in cases.iter().zip(case_tids(&out)) {
        check_decoders(case, &out.join("perf.data"), tid);
    }
    // QE16 refused these two: a SIGSEGV handler installed with signal(), the fault in a block
    // of plain instructions, and in one that ends in a RET.
    let fault = c_program(
        dir.path(),
        "fault",
        "#include <setjmp.h>\n#include <signal.h>\n#include <stdio.h>\nstatic sigjmp_buf env;\n\
         static void h(int s) { siglongjmp(env, s); }\n\
         int main(int c, char **v) { signal(SIGSEGV, h); if (!sigsetjmp(env, 1)) *(volatile int *)(long)(c - 1) = 1;\n\
         puts(\"recovered\"); return 0; }\n",
    );
    let fault_ret = c_program(
        dir.path(),
        "fault_ret",
        "#include <setjmp.h>\n#include <signal.h>\n#include <stdio.h>\nstatic sigjmp_buf env;\n\
         static void h(int s) { siglongjmp(env, s); }\n\
         __attribute__((noinline)) static int load(volatile int *p) { return *p; }\n\
         int main(int c, char **v) { signal(SIGSEGV, h); if (!sigsetjmp(env, 1)) c += load((volatile int *)(long)(c - 1));\n\
         printf(\"recovered %d\\n\", c > 100); return 0; }\n",
    );
    for (exe, prints) in [(&fault, "recovered\n"), (&fault_ret, "recovered 0\n")] {
        let out = dir
            .path()
            .join(format!("o-{}", exe.file_name().unwrap().to_str().unwrap()));
        let o = ptemu_run(&out, &["--perf-data"], &[s(exe)], b"");
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert_eq!(text(&o.stdout), prints);
        assert_eq!(report(&out)["input"]["counts"]["signals_delivered"], 1);
        // One thread: perf.data names it 1000, as for any program of one thread.
        check_decoders(&out, &out.join("perf.data"), 1000);
    }
}

/// QE22's oracle from QEMU's own log: the vCPU whose last block holds `at`, the faulting
/// instruction, ran that block up to it; every other vCPU ran its blocks to their ends (QEMU
/// stops them between blocks before it kills the process).
fn cut_at_death(cpus: &BlockLog, at: u64) -> BlockLog {
    let mut cut = cpus.clone();
    let last = cut
        .iter_mut()
        .filter_map(|b| b.iter_mut().rev().find(|b| !b.is_empty()))
        .find(|b| b.contains(&at))
        .unwrap_or_else(|| panic!("no vCPU's last block holds {at:#x}"));
    let k = last.iter().position(|&a| a == at).unwrap();
    last.truncate(k);
    cut
}

/// The truth's last fact before its end record.
fn last_fact(case: &Path) -> String {
    let truth = common::cli::truth_jsonl(case);
    let lines: Vec<&str> = truth.lines().filter(|l| !l.contains("\"k\":\"mark\"")).collect();
    lines[lines.len() - 2].to_string()
}

/// The async fact of a trace that leaves user mode at `at` (QE21, QE22).
fn leaves_at(at: u64) -> String {
    format!("{{\"k\":\"async\",\"from\":\"{at:#x}\"")
}

/// Runs tests/data/qemu/crash.c's `how` (QE22), which one signal kills in its one thread: exits
/// 128 + `signal` having printed "ran"; its truth is what QEMU's log of the run says it ran up
/// to `at` (whole when `at` is 0: the fetch there ran no block), where the trace leaves user
/// mode (its last fact); report.json names the signal and RIP `rip`. Returns the run's case.
fn died_single_threaded(dir: &Path, exe: &Path, how: &str, at: u64, signal: i32, rip: u64) -> PathBuf {
    let out = dir.join(format!("o-{how}"));
    let (o, cpus) = run_logged(dir, &out, &["--perf-data"], &[s(exe), how]);
    assert_eq!(o.status.code(), Some(128 + signal), "{how}: {}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "ran\n", "{how}");
    let cut = if at == 0 {
        cpus.clone()
    } else {
        cut_at_death(&cpus, at)
    };
    assert_each_vcpu_is_a_case(&cut, std::slice::from_ref(&out));
    let last = last_fact(&out);
    assert!(last.starts_with(&leaves_at(at)), "{how}: {last}");
    let killed = &report(&out)["program"]["killed"];
    assert_eq!(
        (&killed["signal"], &killed["ip"]),
        (&signal.into(), &format!("{rip:#x}").into()),
        "{how}"
    );
    out
}

/// QE22: a program that a fault it has no handler for kills (tests/data/qemu/crash.c): a NULL
/// store in the middle of a block, at the first instruction of one and at the last (an
/// indirect CALL through NULL), a CALL to address 0 (the fetch faults), a division by zero
/// (SIGFPE) and `ud2` (SIGILL). `ptemu run` exits with the program's status (128 + the signal,
/// QE11) and writes its trace: its truth is exactly what QEMU's log of the same run says the
/// program executed, the faulting block cut at the faulting instruction, where the trace
/// leaves user mode (the truth's last fact; report.json says so); perf and libipt decode it
/// with no error and `ptemu verify` accepts both (FUP at the faulting instruction and TIP.PGD:
/// PGD2, TIP3); with Event Trace libipt reads the #PF's EVD and CFE (EVT1).
#[test]
fn qe22_a_fault_that_kills_the_program_is_traced_to_the_faulting_instruction() {
    let dir = tempfile::tempdir().unwrap();
    let exe = data_program(dir.path(), "crash", &["-no-pie"]);
    for (how, label, signal) in [
        ("store", "crash_store", 11),
        ("first", "crash_first", 11),
        ("last", "crash_last", 11),
        ("fetch", "", 11),
        ("div", "crash_div", 8),
        ("ud2", "crash_ud2", 4),
    ] {
        let at = if label.is_empty() { 0 } else { symbol(&exe, label) };
        let out = died_single_threaded(dir.path(), &exe, how, at, signal, at);
        if at == 0 {
            // perf 6.1 walks from the CALL's target to the FUP there, fetching the instruction
            // at 0 first: "Failed to get instruction", as it would on hardware's same packets
            // (TIP 0, FUP 0, TIP.PGD). libipt reads them.
            common::qemu::check_libipt(&out);
        } else {
            check_decoders(&out, &out.join("perf.data"), 1000);
        }
    }
    // Event Trace: the #PF's EVD(CR2 = 0) and CFE before the FUP, which libipt reads.
    let out = dir.path().join("o-event");
    let o = ptemu_run(
        &out,
        &["--cpu", "generic-max", "--ctl", "EventEn=1"],
        &[s(&exe), "store"],
        b"",
    );
    assert_eq!(o.status.code(), Some(139), "{}", text(&o.stderr));
    let truth = common::cli::truth_jsonl(&out);
    assert!(truth.contains("interrupt 14, cr2: 0000000000000000"), "{truth}");
    let libipt = libipt_decode::decode_case(&out);
    assert!(!libipt.contains("error"), "libipt: {libipt}");
    assert!(verify(&out, libipt.as_bytes()).status.success());
}

/// QE22: an INT3 with no SIGTRAP handler kills the program (tests/data/qemu/crash.c `int3`).
/// INT3 is a trap: it enters the kernel, which kills the program there, so QEMU's RIP is the
/// instruction after it, where the program never went. The trace ends as at a SYSCALL (QE7)
/// with the software interrupt's transfer into the kernel: FUP at the INT3, TIP.PGD (SDM Table
/// 36-23: a software interrupt's FUP is the INT itself, so decoders and the truth list the
/// instructions before it, and the truth's last fact is the `async` from it). Before, the
/// reader traced the INT3 as coming back at the next instruction and an interrupt there.
/// Exit 133; the truth is QEMU's log of the run up to the INT3; report.json names SIGTRAP and
/// RIP; perf and libipt decode it, and `ptemu verify` accepts both.
#[test]
fn qe22_tip3_pgd2_an_int3_that_kills_the_program_ends_the_trace_in_the_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let exe = data_program(dir.path(), "crash", &["-no-pie"]);
    let at = symbol(&exe, "crash_int3");
    // QEMU's RIP is after the INT3, which is one byte.
    let out = died_single_threaded(dir.path(), &exe, "int3", at, 5, at + 1);
    check_decoders(&out, &out.join("perf.data"), 1000);
}

/// QE22 with threads and processes: a second thread's NULL store kills the program while the
/// main thread computes (QEMU stops the main thread between two blocks: its trace ends there
/// with an interrupt, the other's at the store), and a forked child's kills the child alone (its
/// process's trace ends at the store, the parent exits 0). Each thread's truth is what QEMU's
/// log says it ran, and perf and libipt decode every case.
#[test]
fn qe22_a_fault_in_a_thread_or_a_forked_child_is_traced_for_each() {
    let dir = tempfile::tempdir().unwrap();
    let exe = data_program(dir.path(), "crash", &["-no-pie"]);
    let at = symbol(&exe, "crash_store");
    let out = dir.path().join("o-thread");
    let (o, cpus) = run_logged(dir.path(), &out, &["--perf-data"], &[s(&exe), "thread"]);
    assert_eq!(o.status.code(), Some(139), "{}", text(&o.stderr));
    let cases = thread_cases(&out);
    assert_eq!(cases.len(), 2);
    assert_each_vcpu_is_a_case(&cut_at_death(&cpus, at), &cases);
    // The main thread was interrupted where it was; the worker died at the store.
    assert!(
        last_fact(&cases[0]).starts_with("{\"k\":\"async\""),
        "{}",
        last_fact(&cases[0])
    );
    assert_eq!(report(&cases[0])["program"]["killed"], Value::Null);
    assert!(
        last_fact(&cases[1]).starts_with(&leaves_at(at)),
        "{}",
        last_fact(&cases[1])
    );
    assert_eq!(report(&cases[1])["program"]["killed"]["signal"], 11);
    for (case, tid) in cases.iter().zip(case_tids(&out)) {
        check_decoders(case, &out.join("perf.data"), tid);
    }
    let out = dir.path().join("o-fork");
    let o = ptemu_run(&out, &["--perf-data"], &[s(&exe), "fork"], b"");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "ran\nchild killed by 11\n");
    let r = report(&out);
    let procs = r["program"]["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "{r}");
    let child = out.join(procs[0]["case"].as_str().unwrap());
    assert!(
        last_fact(&child).starts_with(&leaves_at(at)),
        "{}",
        last_fact(&child)
    );
    assert_eq!(report(&child)["program"]["killed"]["ip"], format!("{at:#x}"));
    for case in [&out, &child] {
        check_decoders(case, &case.join("perf.data"), 1000);
    }
}

/// QE22: a SIGSEGV another thread sends (pthread_kill: no fault, `si_code` SI_TKILL) while the
/// main thread computes is no fault: the plugin notes it as sent, and the main thread's trace
/// ends with an interrupt before the instruction it would have run next, its last block whole
/// (QEMU takes the signal between blocks), as QEMU's own log of the run says; the run exits
/// 139, says the signal killed it, and both threads' traces decode (perf, libipt). Before the
/// plugin told a sent signal from a fault, a host SIGSEGV of SI_TKILL during the last block was
/// taken for a fault at the thread's RIP.
#[test]
fn qe22_a_sigsegv_sent_by_another_thread_is_traced_as_an_interrupt_not_a_fault() {
    let dir = tempfile::tempdir().unwrap();
    let exe = data_program(dir.path(), "crash", &["-no-pie"]);
    let out = dir.path().join("o-sent");
    let (o, cpus) = run_logged(dir.path(), &out, &["--perf-data"], &[s(&exe), "sent"]);
    let e = text(&o.stderr);
    assert_eq!(o.status.code(), Some(139), "{e}");
    let cases = thread_cases(&out);
    assert_eq!(cases.len(), 2);
    assert_each_vcpu_is_a_case(&cpus, &cases);
    let killed = &report(&cases[0])["program"]["killed"];
    assert_eq!(killed["signal"], 11, "{killed}");
    let rip = u64::from_str_radix(killed["ip"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    let last = last_fact(&cases[0]);
    assert!(last.starts_with("{\"k\":\"async\""), "{last}");
    // The last instruction that ran is the last block's last, which goes to RIP (gcc makes
    // the main thread's loop one JMP to itself).
    let truth = common::cli::truth_jsonl(&cases[0]);
    let insn = truth
        .lines()
        .rev()
        .find(|l| l.contains("\"k\":\"insn\""))
        .unwrap();
    assert!(insn.contains(&format!("\"to\":\"{rip:#x}\"")), "{insn}");
    for (case, tid) in cases.iter().zip(case_tids(&out)) {
        check_decoders(case, &out.join("perf.data"), tid);
    }
}

/// QE22: a program that stops (SIGTSTP: QEMU stops with it) and is continued (SIGCONT, from a
/// forked child) was not killed: no last words are taken for its death, its trace goes on to
/// its exit, the run passes its status 0, and both processes' traces decode (perf, libipt).
/// On QEMU 7.2 the stop is the host's own SIGTSTP, not a `kill` of QEMU's.
#[test]
fn qe22_a_program_that_stops_and_is_continued_is_not_taken_for_killed() {
    let dir = tempfile::tempdir().unwrap();
    let exe = data_program(dir.path(), "crash", &["-no-pie"]);
    let out = dir.path().join("o-stop");
    let o = ptemu_run(&out, &["--perf-data"], &[s(&exe), "stop"], b"");
    let e = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert_eq!(text(&o.stdout), "ran\ncontinued\n");
    assert!(!e.contains("killed"), "{e}");
    let r = report(&out);
    assert_eq!(r["program"]["killed"], Value::Null, "{r}");
    assert_eq!(r["program"]["exit_status"], 0, "{r}");
    let procs = r["program"]["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "{r}");
    let child = out.join(procs[0]["case"].as_str().unwrap());
    assert_eq!(report(&child)["program"]["killed"], Value::Null);
    for case in [&out, &child] {
        check_decoders(case, &case.join("perf.data"), 1000);
    }
}

/// QE22: a crashed program's run says how it died, on stderr (a successful trace: `ptemu run`
/// exits with the program's status), and leaves nothing in the program's directory even where
/// core files are allowed (QEMU would write its guest's core there, and the kernel QEMU's own).
#[test]
fn qe22_a_crash_is_reported_and_leaves_no_core_file() {
    let dir = tempfile::tempdir().unwrap();
    let exe = data_program(dir.path(), "crash", &["-no-pie"]);
    let at = symbol(&exe, "crash_store");
    let cwd = dir.path().join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    let out = dir.path().join("o");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptemu"));
    env(&mut cmd)
        .current_dir(&cwd)
        .args(["run", "--plugin", s(&plugin()), "--out", s(&out), "--"])
        .args([s(&exe), "store"]);
    // SAFETY: setrlimit only, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let unlimited = libc::rlimit {
                rlim_cur: libc::RLIM_INFINITY,
                rlim_max: libc::RLIM_INFINITY,
            };
            if libc::setrlimit(libc::RLIMIT_CORE, &unlimited) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = feed(cmd, b"");
    let e = text(&o.stderr);
    assert_eq!(o.status.code(), Some(139), "{e}");
    assert!(e.contains("program: was killed by signal 11"), "{e}");
    assert!(
        e.contains(&format!("signal 11 killed it at {at:#x}, where the trace ends")),
        "{e}"
    );
    let left: Vec<_> = std::fs::read_dir(&cwd)
        .unwrap()
        .map(|f| f.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left in the program's directory: {left:?}");
}

/// PD5, TR13 (issue 54 §5): perf times the first instruction after each return to user space
/// by its own estimate, not by the trace's timing packets: the last timestamp plus 2 TSC ticks
/// for each instruction since it (at CBR = the nominal ratio; perf's `intel_pt_est_timestamp`,
/// used where `intel_pt_run_decoder` sees a branch from the kernel or from nowhere into user
/// space), never held back by the next TSC. On a `ptemu run` trace with system calls, whose
/// model runs 1 cycle per instruction, perf's time there runs past the next timing packet, and
/// `verify --time 5` says so at an instruction right after an enable; with the model at 2 cycles
/// per instruction, perf's estimate is the model's own clock and its times pass.
#[test]
fn pd5_tr13_perf_times_a_return_to_user_space_by_its_own_estimate() {
    let dir = tempfile::tempdir().unwrap();
    let true_program = which("true");
    let program = [s(&true_program)];
    let perf_times = |case: &Path| {
        let perf = Command::new("perf")
            .args(["script", "-i"])
            .arg(case.join("perf.data"))
            .args(["--itrace=i0nse", "-F", "time,ip", "--ns"])
            .output()
            .expect("perf (Debian's linux-perf)");
        assert!(perf.status.success(), "perf: {}", text(&perf.stderr));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptemu"));
        cmd.args(["verify", s(case), "--ips", "-", "--time", "5"]);
        feed(cmd, &perf.stdout)
    };
    let one = dir.path().join("cpi1");
    let o = ptemu_run(&one, &["--perf-data"], &program, b"");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v = perf_times(&one);
    assert_eq!(
        v.status.code(),
        Some(1),
        "perf's estimate runs ahead: {}",
        text(&v.stdout)
    );
    let said = text(&v.stderr);
    let index: u64 = said
        .split("expected truth instruction ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no truth instruction named: {said}"));
    assert!(said.contains("the decoder gave time"), "{said}");
    // The instruction is the first one after an enable: a return to user space.
    let truth = common::cli::truth_jsonl(&one);
    let lines: Vec<&str> = truth.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with(&format!("{{\"k\":\"insn\",\"i\":{index},")))
        .unwrap();
    assert!(
        lines[at - 1].starts_with("{\"k\":\"enable\""),
        "{}",
        lines[at - 1]
    );

    let two = dir.path().join("cpi2");
    let config = dir.path().join("cpi2.toml");
    std::fs::write(&config, "cycles_per_instruction = 2\n").unwrap();
    let o = ptemu_run(
        &two,
        &["--perf-data", "--tracer-config", s(&config)],
        &program,
        b"",
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v = perf_times(&two);
    assert!(v.status.success(), "{}{}", text(&v.stdout), text(&v.stderr));
}
