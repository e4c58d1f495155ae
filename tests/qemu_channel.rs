//! `ptemu run` lets no one else in (spec/qemu.md QE19, QE20): another local user finds no way
//! into a run; forged hand-overs from inside the run are refused; forked children are bounded
//! (streams at once, bytes a stream, time after the program ended); a full disk is exit 2 with
//! nothing written; a signal to ptemu ends QEMU too. Needs Debian's qemu-user and gcc; the
//! other-user and full-disk tests need root (they say so and return where it is missing).

mod common;

use common::cli::{s, text};
use common::qemu::{data_program, env, plugin};
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn ptemu_run(out: &Path, extra: &[&str], program: &[&str]) -> Output {
    run_command(out, extra, program).output().unwrap()
}

/// The command `ptemu run -q EXTRA --out OUT -- PROGRAM...`, stdin empty.
fn run_command(out: &Path, extra: &[&str], program: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptemu"));
    env(&mut cmd)
        .arg("run")
        .args(["--plugin", s(&plugin()), "-q", "--out", s(out)])
        .args(extra)
        .arg("--")
        .args(program)
        .stdin(Stdio::null());
    cmd
}

fn report(case: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(case.join("report.json")).unwrap()).unwrap()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A second local user (made with useradd if missing): its uid and gid.
fn other_user() -> Option<(u32, u32)> {
    const NAME: &str = "ptemu-test-other";
    let id = |flag: &str| {
        Command::new("id")
            .args([flag, NAME])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| text(&o.stdout).trim().parse::<u32>().ok())
    };
    if id("-u").is_none() {
        let made = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                NAME,
            ])
            .status();
        if !made.is_ok_and(|s| s.success()) {
            return None;
        }
    }
    Some((id("-u")?, id("-g")?))
}

/// QE19: every attack of issue 50 from another local user (connecting to any socket whose
/// name holds "ptemu", holding connections, streaming zeros, forging a child's stream, opening
/// the run's descriptors) finds nothing to reach: the run ends while the attacker still holds
/// on, with the outputs of a run nobody attacked.
#[test]
fn qe19_another_user_finds_no_way_into_a_run() {
    if !is_root() {
        eprintln!(
            "qe19_another_user_finds_no_way_into_a_run: skipped: it makes a second user, which needs root"
        );
        return;
    }
    let Some((uid, gid)) = other_user() else {
        eprintln!("qe19_another_user_finds_no_way_into_a_run: skipped: useradd failed");
        return;
    };
    // Where the other user can run the attacker from.
    let tools = tempfile::Builder::new()
        .prefix("ptemu-attacker")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(tools.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let attacker = data_program(tools.path(), "attacker", &[]);
    let dir = tempfile::tempdir().unwrap();
    let program = data_program(dir.path(), "children", &[]);
    let args = [s(&program), "children", "1", "300", "1000"];
    let quiet = ptemu_run(&dir.path().join("quiet"), &[], &args);
    assert_eq!(quiet.status.code(), Some(3), "{}", text(&quiet.stderr));

    let mut attack = Command::new(&attacker);
    attack
        .args(["8000", &std::process::id().to_string()])
        .stdout(Stdio::piped());
    // SAFETY: setgroups, setgid and setuid between fork and exec.
    unsafe {
        attack.pre_exec(move || {
            if libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut attacker = attack.spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let out = dir.path().join("attacked");
    let attacked = ptemu_run(&out, &[], &args);
    let still_attacking = attacker.try_wait().unwrap().is_none();
    let seen = text(&attacker.wait_with_output().unwrap().stdout);
    assert!(
        seen.contains("connections 0 descriptors 0"),
        "the other user reached the run: {seen}"
    );
    assert!(still_attacking, "the run waited for the attacker to go: {seen}");
    assert_eq!(
        (attacked.status.code(), text(&attacked.stdout)),
        (quiet.status.code(), text(&quiet.stdout)),
        "{}",
        text(&attacked.stderr)
    );
    let (r, q) = (report(&out), report(&dir.path().join("quiet")));
    for key in ["processes", "forks_not_traced", "forks_refused"] {
        assert_eq!(
            r["program"][key].as_array().map(Vec::len),
            q["program"][key].as_array().map(Vec::len),
            "{key}: {}",
            r["program"]
        );
    }
    assert!(r["program"]["forks_refused"].as_array().unwrap().is_empty());
    let names = |d: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&out), names(&dir.path().join("quiet")));
}

/// QE19: a stream handed over from inside the run is refused unless it is the stream of a child
/// a traced process forked, sent by that child: one that names another process, and one from a
/// process nobody forked, are listed in `forks_refused` with why; the program is traced.
#[test]
fn qe19_a_stream_not_from_the_child_it_names_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let program = data_program(dir.path(), "handover", &[]);
    let out = dir.path().join("out");
    let o = ptemu_run(&out, &[], &[s(&program)]);
    assert_eq!(
        (o.status.code(), text(&o.stdout)),
        (Some(0), "handed over: 0 0\n".into()),
        "{}",
        text(&o.stderr)
    );
    let r = report(&out);
    let refused: Vec<String> = r["program"]["forks_refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["why"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(
        refused.iter().any(|w| w.contains("says it is process 1")),
        "{refused:?}"
    );
    assert!(
        refused.iter().any(|w| w.contains("no traced process forked it")),
        "{refused:?}"
    );
    assert!(r["program"]["processes"].as_array().unwrap().is_empty());
    assert!(!out.join("processes").exists());
    assert!(text(&o.stderr).contains("not traced"), "{}", text(&o.stderr));
}

/// QE19: forked children are bounded: streams open at once (--max-children), bytes a stream
/// (--max-stream-bytes) and the wait after the program ended (--wait-children); past each,
/// exit 2 naming the limit and its option, nothing written. Within them the children are traced.
#[test]
fn qe19_forked_children_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let program = data_program(dir.path(), "children", &[]);
    let p = s(&program);
    let refused = |extra: &[&str], args: &[&str], option: &str| {
        let out = dir.path().join(format!("out{}", option));
        let o = ptemu_run(&out, extra, args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{option}: {err}");
        assert!(
            err.contains(option) && err.contains("nothing written"),
            "{option}: {err}"
        );
        assert!(!out.exists(), "{option}: {} was written", out.display());
    };
    // Three children alive at once, two allowed.
    refused(
        &["--max-children", "2"],
        &[p, "children", "3", "1500", "10"],
        "--max-children",
    );
    // A child whose stream passes 4 KiB.
    refused(
        &["--max-stream-bytes", "4K"],
        &[p, "children", "1", "0", "200000"],
        "--max-stream-bytes",
    );
    // A child that runs on 5 s after the program ended, one second allowed.
    refused(
        &["--wait-children", "1"],
        &[p, "orphan", "5000"],
        "--wait-children",
    );
    // Within the limits every child is traced.
    let out = dir.path().join("within");
    let o = ptemu_run(
        &out,
        &["--max-children", "3"],
        &[p, "children", "3", "500", "1000"],
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert_eq!(report(&out)["program"]["processes"].as_array().unwrap().len(), 3);
    let out = dir.path().join("orphan");
    let o = ptemu_run(&out, &[], &[p, "orphan", "1000"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(report(&out)["program"]["processes"].as_array().unwrap().len(), 1);
}

/// QE19, QE11: a disk that fills while a child's stream or case is written is exit 2, not the
/// program's status, and nothing is written (README, "What is written when").
#[test]
fn qe19_a_full_disk_while_children_are_traced_is_exit_2_and_nothing_written() {
    if !is_root() {
        eprintln!("qe19_a_full_disk...: skipped: mounting a small tmpfs needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=12m", "tmpfs", s(&disk)])
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("qe19_a_full_disk...: skipped: this machine cannot mount a tmpfs");
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(&disk);
    let program = data_program(dir.path(), "children", &[]);
    // The child's stream (millions of block executions) cannot fit in 12 MiB; the parent's
    // trace does.
    let out = disk.join("out");
    let o = ptemu_run(
        &out,
        &["--no-truth"],
        &[s(&program), "children", "1", "0", "20000000"],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(!out.exists(), "{} was left", out.display());
    assert_eq!(
        std::fs::read_dir(&disk).unwrap().count(),
        0,
        "the staging directory was left"
    );
}

/// QE20: SIGTERM or SIGINT sent to ptemu alone is handed to QEMU (the traced program), which
/// ends with it; ptemu cleans up and exits 128 + N.
#[test]
fn qe20_a_signal_to_ptemu_ends_the_traced_program_too() {
    let dir = tempfile::tempdir().unwrap();
    for (sig, code) in [(libc::SIGTERM, 143), (libc::SIGINT, 130)] {
        let out = dir.path().join(format!("out{sig}"));
        let mut ptemu = run_command(&out, &[], &["/bin/sleep", "30"]).spawn().unwrap();
        let pid = ptemu.id();
        // QEMU, once started: ptemu's child.
        let mut qemu = None;
        for _ in 0..1000 {
            qemu = children_of(pid).into_iter().next();
            if qemu.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let qemu = qemu.expect("ptemu started QEMU");
        std::thread::sleep(std::time::Duration::from_millis(300));
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(pid as i32, sig) };
        let status = ptemu.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), None);
        assert_eq!(status.code(), Some(code));
        // QEMU ends too (it is reaped by init once ptemu is gone): its /proc entry goes.
        let mut gone = false;
        for _ in 0..1000 {
            let stat = std::fs::read_to_string(format!("/proc/{qemu}/stat")).unwrap_or_default();
            // Gone, or a zombie waiting for init.
            if stat.is_empty()
                || stat
                    .rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
            {
                gone = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(gone, "QEMU ({qemu}) runs on after ptemu ended");
        assert!(!out.exists());
    }
}

/// The pids of `pid`'s children.
fn children_of(pid: u32) -> Vec<u32> {
    let mut v = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let list = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            v.extend(list.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    v
}

/// QE19: the threads that spool finished children's streams are let go as others come: a run of
/// many children one after another keeps ptemu's address space flat (each thread kept its stack
/// mappings until the run's end: 6,057 mappings after 3,000 children, and a hang once the
/// thread that takes hand-overs could no longer start one).
#[test]
fn qe19_children_one_after_another_keep_ptemu_flat() {
    let dir = tempfile::tempdir().unwrap();
    let program = data_program(dir.path(), "children", &[]);
    let peak_maps = |n: &str| {
        let out = dir.path().join(format!("serial{n}"));
        let mut child = run_command(&out, &["--no-truth"], &[s(&program), "serial", n])
            .spawn()
            .unwrap();
        let mut peak = 0;
        while child.try_wait().unwrap().is_none() {
            let maps = std::fs::read_to_string(format!("/proc/{}/maps", child.id())).unwrap_or_default();
            peak = peak.max(maps.lines().count());
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(child.wait().unwrap().code(), Some(0));
        assert_eq!(
            report(&out)["program"]["processes"].as_array().unwrap().len(),
            n.parse::<usize>().unwrap()
        );
        peak
    };
    let few = peak_maps("5");
    let many = peak_maps("400");
    assert!(
        many < few + 200,
        "{many} mappings with 400 children, {few} with 5"
    );
}

/// QE18, QE19: a child whose own trace is refused (killed outside a system call, QE7) still
/// said which children it forked: its grandchild, which ran and exited, is traced.
#[test]
fn qe18_the_children_of_a_child_that_is_refused_are_traced() {
    let dir = tempfile::tempdir().unwrap();
    let program = data_program(dir.path(), "children", &[]);
    let out = dir.path().join("out");
    let o = ptemu_run(&out, &[], &[s(&program), "killmid"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let r = report(&out);
    let refused = r["program"]["forks_refused"].as_array().unwrap();
    let traced = r["program"]["processes"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{}", r["program"]);
    assert_eq!(traced.len(), 1, "the grandchild: {}", r["program"]);
    assert_eq!(traced[0]["parent"], refused[0]["pid"], "{}", r["program"]);
}

/// QE19: hand-overs refused are listed with why up to 64; the rest are counted, so what a
/// program sends into the fork descriptor cannot make the report or ptemu grow without bound.
#[test]
fn qe19_refused_hand_overs_are_listed_up_to_a_bound() {
    let dir = tempfile::tempdir().unwrap();
    let program = data_program(dir.path(), "handover", &[]);
    let out = dir.path().join("out");
    let o = ptemu_run(&out, &[], &[s(&program), "spam", "200"]);
    assert_eq!(
        (o.status.code(), text(&o.stdout)),
        (Some(0), "spammed\n".into()),
        "{}",
        text(&o.stderr)
    );
    let refused = report(&out)["program"]["forks_refused"].as_array().unwrap().len();
    assert_eq!(refused, 64);
    assert!(
        text(&o.stderr).contains("136 more hand-overs"),
        "{}",
        text(&o.stderr)
    );
}

/// QE10: shutting the fork descriptor down is closing it: refused, exit 2, nothing written.
#[test]
fn qe10_shutting_the_plugins_socket_down_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let program = data_program(dir.path(), "handover", &[]);
    let out = dir.path().join("out");
    let o = ptemu_run(&out, &[], &[s(&program), "shut"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("shut the plugin's socket down"),
        "{}",
        text(&o.stderr)
    );
    assert!(!out.exists());
}

/// QE20: the program handed ptemu's SIGTERM does with it what it does: a handler that takes
/// its time to clean up finishes before ptemu ends (ptemu waits for it), then ptemu exits 143.
#[test]
fn qe20_a_program_handed_the_signal_handles_it_before_ptemu_ends() {
    let dir = tempfile::tempdir().unwrap();
    let exe = common::qemu::c_program(
        dir.path(),
        "trap",
        "#include <signal.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <unistd.h>\n\
         static const char *path;\n\
         static void done(int s) { (void)s; usleep(300000); FILE *f = fopen(path, \"w\");\n\
           fputs(\"cleaned\\n\", f); fclose(f); _exit(0); }\n\
         int main(int argc, char **argv) { path = argv[1]; signal(SIGTERM, done);\n\
           FILE *f = fopen(path, \"w\"); fputs(\"start\\n\", f); fclose(f);\n\
           for (;;) pause(); }\n",
    );
    let mark = dir.path().join("mark");
    let out = dir.path().join("out");
    let mut ptemu = run_command(&out, &[], &[s(&exe), s(&mark)]).spawn().unwrap();
    for _ in 0..1000 {
        if std::fs::read_to_string(&mark).is_ok_and(|t| t == "start\n") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(ptemu.id() as i32, libc::SIGTERM) };
    assert_eq!(ptemu.wait().unwrap().code(), Some(143));
    assert_eq!(std::fs::read_to_string(&mark).unwrap(), "cleaned\n");
    assert!(!out.exists());
}

/// QE20: ptemu as the first process of a pid namespace (as in a container) starts QEMU: the
/// check that ptemu is still QEMU's parent compares with ptemu's own pid, not with 1.
#[test]
fn qe20_ptemu_as_pid_1_starts_qemu() {
    if !is_root() {
        eprintln!("qe20_ptemu_as_pid_1_starts_qemu: skipped: a pid namespace needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount-proc", env!("CARGO_BIN_EXE_ptemu")])
        .args([
            "run",
            "--plugin",
            s(&plugin()),
            "-q",
            "--out",
            s(&out),
            "--",
            "/bin/echo",
            "hi",
        ])
        .env_clear()
        .env("PATH", common::qemu::PATH);
    let Ok(o) = cmd.output() else {
        eprintln!("qe20_ptemu_as_pid_1_starts_qemu: skipped: no unshare");
        return;
    };
    if text(&o.stderr).contains("unshare failed") {
        eprintln!("qe20_ptemu_as_pid_1_starts_qemu: skipped: {}", text(&o.stderr));
        return;
    }
    assert_eq!(
        (o.status.code(), text(&o.stdout)),
        (Some(0), "hi\n".into()),
        "{}",
        text(&o.stderr)
    );
    assert!(out.join("trace.pt").is_file());
}
