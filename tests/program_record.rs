//! `ptemu run` as a library call (spec/qemu.md, "The library call"): [`ptemu::program::record`]
//! on a real program under qemu-x86_64, its typed [`Recording`] checked against the cases it
//! wrote, and its typed errors. Needs Debian's qemu-user and gcc, as tests/qemu_run.rs does.

mod common;

use common::qemu::{c_program, plugin};
use ptemu::program::{self, RecordError, RecordOptions, Recording};
use serde_json::Value;
use std::ffi::OsString;
use std::path::Path;

/// Main starts two threads that compute, joins them, forks a child that computes and exits 5,
/// and exits 3 when the child did.
const THREADS_AND_A_CHILD: &str = "#include <pthread.h>\n\
#include <sys/wait.h>\n\
#include <unistd.h>\n\
static void *work(void *a) { long n = (long)a, s = 0; for (long i = 0; i < n; i++) s += i * (i & 7); return (void *)s; }\n\
int main(void) {\n\
  pthread_t t[2]; void *r;\n\
  for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, work, (void *)(long)(4000 * (i + 1)));\n\
  for (int i = 0; i < 2; i++) pthread_join(t[i], &r);\n\
  pid_t c = fork();\n\
  if (c == 0) { work((void *)3000L); _exit(5); }\n\
  int st; waitpid(c, &st, 0);\n\
  return WIFEXITED(st) && WEXITSTATUS(st) == 5 ? 3 : 1;\n\
}\n";

fn options(command: &[&Path], out: &Path) -> RecordOptions {
    let command = command.iter().map(|p| OsString::from(p.as_os_str())).collect();
    RecordOptions::new(command, out).with_plugin(Some(plugin()))
}

/// The instructions a case's truth lists (`ptemu truth dump`, one line an instruction).
fn truth_instructions(case: &Path) -> u64 {
    common::cli::truth_jsonl(case)
        .lines()
        .filter(|l| serde_json::from_str::<Value>(l).unwrap()["k"] == "insn")
        .count() as u64
}

fn report(case: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(case.join("report.json")).unwrap()).unwrap()
}

fn tids(v: &Value) -> Vec<u64> {
    let mut t: Vec<u64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tid"].as_u64().unwrap())
        .collect();
    t.sort_unstable();
    t
}

/// QE11, QE15, QE18: the Recording of a program with two threads and a forked child says what
/// its cases on disk hold: the program's exit status, each case's instructions as its truth
/// lists them and its trace's bytes, the threads and the child that report.json lists.
#[test]
fn qe11_qe15_qe18_record_returns_what_its_cases_hold() {
    let dir = tempfile::tempdir().unwrap();
    let exe = c_program(dir.path(), "threads", THREADS_AND_A_CHILD);
    let out = dir.path().join("out");
    let r: Recording = program::record(&options(&[&exe], &out)).unwrap();

    assert_eq!(r.exit_code(), 3, "the program's own status (QE11)");
    assert!(r.exit.code() == Some(3));
    assert_eq!(r.executable, exe);
    assert_eq!(r.name, "threads");
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert_eq!(r.replaced_by, None);

    // The main thread: DIR.
    let main = report(&out);
    let instructions = truth_instructions(&out);
    assert!(instructions > 10_000, "{instructions}");
    assert_eq!(r.instructions(), instructions);
    assert_eq!(r.truth.as_ref().unwrap().counts.instructions, instructions);
    // The report the Recording holds is DIR's.
    assert_eq!(main["stats"]["instructions"], r.report.stats.instructions);
    assert_eq!(main["stats"]["trace_bytes"], r.report.stats.trace_bytes);
    assert_eq!(
        std::fs::metadata(out.join("trace.pt")).unwrap().len(),
        r.outcome.unit.stats().bytes_written
    );
    assert_eq!(main["program"]["exit_status"], 3);
    assert_eq!(main["program"]["tid"].as_u64(), r.sideband.tid);

    // QE15: the two threads, each a case of its own.
    assert_eq!(r.threads.len(), 2);
    let mut listed: Vec<u64> = r.threads.iter().map(|t| t.tid).collect();
    listed.sort_unstable();
    assert_eq!(listed, tids(&main["program"]["threads"]));
    for t in &r.threads {
        let case = out.join(&t.dir);
        assert_eq!(t.dir, format!("threads/{}", t.tid));
        assert_eq!(t.parent, r.sideband.tid, "thread {} was started by main", t.tid);
        assert_eq!(t.instructions, truth_instructions(&case), "thread {}", t.tid);
        assert!(t.instructions > 4000, "thread {}: {}", t.tid, t.instructions);
        assert_eq!(
            std::fs::metadata(case.join("trace.pt")).unwrap().len(),
            t.trace_bytes
        );
        assert_eq!(report(&case)["program"]["tid"], t.tid);
    }

    // QE18: the forked child, a process of its own.
    let p = &r.processes;
    assert_eq!(p.traced.len(), 1, "{p:?}");
    assert!(p.missing.is_empty() && p.failed.is_empty(), "{p:?}");
    let child = &p.traced[0];
    let case = out.join(&child.case);
    assert_eq!(child.case, format!("processes/{}", child.pid));
    assert_eq!(child.parent, r.sideband.tid);
    assert_eq!(child.instructions, truth_instructions(&case));
    assert!(child.threads.is_empty());
    assert_eq!(
        std::fs::metadata(case.join("trace.pt")).unwrap().len(),
        child.trace_bytes
    );
    let listed = &main["program"]["processes"];
    assert_eq!(listed[0]["pid"], child.pid);
    assert_eq!(listed[0]["case"], child.case.as_str());
    assert_eq!(report(&case)["program"]["pid"], child.pid);
}

/// QE11: the typed errors, and nothing written: a program not found is `NotFound` (`ptemu run`
/// exits 127), a directory `NotExecutable` (126), a QEMU that does not load the plugin
/// `Refused` (exit 2) once the program ran, and OS=1 `Input` (QE6); DIR is never made.
#[test]
fn qe6_qe11_record_errors_are_typed_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let missing = dir.path().join("no-such-program");
    match program::record(&options(&[&missing], &out)) {
        Err(RecordError::NotFound(m)) => {
            assert!(m.contains("No such file or directory"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    assert!(!out.exists());

    match program::record(&options(&[dir.path()], &out)) {
        Err(RecordError::NotExecutable(m)) => assert!(m.ends_with("Is a directory"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(!out.exists());

    let os = options(&[Path::new("/bin/true")], &out);
    let ctl = os.simulate.ctl.with_os(true);
    let os = os.clone().with_simulate(os.simulate.with_ctl(ctl));
    match program::record(&os) {
        Err(RecordError::Input(m)) => assert!(m.starts_with("--ctl OS=1"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(!out.exists());

    // /bin/true as QEMU: it runs, exits 0 and sends no stream.
    let not_qemu = options(&[Path::new("/bin/true")], &out).with_qemu(Some("/bin/true".into()));
    match program::record(&not_qemu) {
        Err(e @ RecordError::Refused(_)) => assert!(!e.is_output()),
        other => panic!("{other:?}"),
    }
    assert!(!out.exists(), "DIR made for the run is removed again");
}
