//! spec/output.md is the contract: every rule ID in its table is named by a test, every test it lists
//! exists, and every rule ptemu reports (`Rule::ALL`) is in the table.

use ptemu::Rule;
use std::collections::BTreeSet;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The body rows of the table under `heading` in `spec/FILE` (header and rule lines dropped).
fn table_rows(file: &str, heading: &str) -> Vec<String> {
    let spec = std::fs::read_to_string(root().join("spec").join(file)).unwrap();
    let section = spec.split(heading).nth(1).unwrap().split("\n## ").next().unwrap();
    let mut rows: Vec<String> = section
        .lines()
        .filter(|l| l.starts_with("| "))
        .map(str::to_string)
        .collect();
    rows.drain(..1.min(rows.len())); // the header row; the `|---|` line does not start with "| "
    rows
}

/// (rule ID, backtick-quoted names in its Tests cell) for each row of the `## Rules` table.
fn spec_rows() -> Vec<(String, Vec<String>)> {
    rule_rows("output.md")
}

/// (rule ID, test names) rows of the `## Rules` table of `spec/FILE`.
fn rule_rows(file: &str) -> Vec<(String, Vec<String>)> {
    table_rows(file, "## Rules")
        .iter()
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            let id = cells[0].trim_start_matches("| ").trim().to_string();
            let tests = cells.last().unwrap();
            let names = tests.split('`').skip(1).step_by(2).map(str::to_string).collect();
            (id, names)
        })
        .collect()
}

/// Names of every test in tests/*.rs and in the unit tests of the crates' sources (src/,
/// ptemu-core/src/, ptemu-qemu/src/, ptemu-wire/src/, every file below them).
fn test_fns() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let top = root().join("tests");
    let mut dirs = vec![top.clone()];
    for d in ["src", "ptemu-core/src", "ptemu-qemu/src", "ptemu-wire/src"] {
        dirs.push(root().join(d));
    }
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && dir != top {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let src = std::fs::read_to_string(&path).unwrap();
                names.extend(tests_in(&src));
            }
        }
    }
    names
}

/// Every rule of `rows` is named by a test (its ID, lower case, as one `_`-separated word of the
/// test's name), and every test a row lists exists.
fn assert_named_by_tests(rows: &[(String, Vec<String>)]) {
    let fns = test_fns();
    for (id, names) in rows {
        assert!(names_rule(&fns, id), "{id}: no test names it");
        for n in names {
            assert!(fns.contains(n), "{id}: listed test {n} does not exist");
        }
    }
}

/// Whether some test carries rule `id`, lower case, as one `_`-separated word of its name.
fn names_rule(fns: &BTreeSet<String>, id: &str) -> bool {
    let token = id.to_ascii_lowercase();
    fns.iter().any(|f| f.split('_').any(|t| t == token))
}

/// The names of the tests in `src`: functions with `#[test]` among the attributes and doc
/// comments right above them (in a `proptest!` block too), not helpers (issue 39).
fn tests_in(src: &str) -> Vec<String> {
    let lines: Vec<&str> = src.lines().collect();
    let mut out = Vec::new();
    for (k, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let Some(rest) = t.strip_prefix("fn ").or_else(|| t.strip_prefix("pub fn ")) else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let is_test = lines[..k]
            .iter()
            .rev()
            .map(|l| l.trim())
            .take_while(|l| {
                l.starts_with("#[") || l.starts_with("//") || l.starts_with(')') || l.starts_with('"')
            })
            .any(|l| l == "#[test]");
        if is_test {
            out.push(name);
        }
    }
    out
}

#[test]
fn only_test_functions_count_as_named_tests() {
    let src = "/// doc\n#[test]\nfn a_test() {}\n\nfn helper() {}\n#[test]\n#[allow(x)]\nfn b() {}\n";
    assert_eq!(tests_in(src), ["a_test", "b"]);
}

#[test]
fn every_spec_rule_is_named_by_a_test() {
    let fns = test_fns();
    let rows = spec_rows();
    assert_eq!(rows.len(), Rule::ALL.len(), "spec table rows");
    let mut missing = Vec::new();
    for (id, _) in &rows {
        if !names_rule(&fns, id) {
            missing.push(id.clone());
        }
    }
    assert!(missing.is_empty(), "rules with no test naming them: {missing:?}");
}

#[test]
fn every_test_the_spec_lists_exists() {
    let fns = test_fns();
    let missing: Vec<String> = spec_rows()
        .into_iter()
        .flat_map(|(_, names)| names)
        .filter(|n| !fns.contains(n))
        .collect();
    assert!(
        missing.is_empty(),
        "spec lists tests that do not exist: {missing:?}"
    );
}

#[test]
fn every_rule_ptemu_reports_is_in_the_spec() {
    let ids: BTreeSet<String> = spec_rows().into_iter().map(|(id, _)| id).collect();
    for rule in Rule::ALL {
        assert!(ids.contains(rule.id()), "{rule} is missing from spec/output.md");
    }
    assert_eq!(ids.len(), Rule::ALL.len(), "spec rows and Rule::ALL differ");
}

/// (packet name, tests cell) rows of spec/packets.md's `## Packets` table.
fn packet_rows() -> Vec<(String, String)> {
    table_rows("packets.md", "## Packets")
        .iter()
        .map(|l| {
            let name = l.split('`').nth(1).unwrap().to_string();
            let tests = l
                .trim_end()
                .trim_end_matches("|")
                .rsplit(" | ")
                .next()
                .unwrap()
                .to_string();
            (name, tests)
        })
        .collect()
}

#[test]
fn every_packet_type_has_a_spec_row_and_its_tests_exist() {
    use ptemu::packet::{IpPayload, Packet, PtwSize, Tnt};
    let ip = IpPayload::SUPPRESSED;
    let t = Tnt { bits: 1, count: 1 };
    let every = [
        Packet::Pad,
        Packet::Tnt8(t),
        Packet::Tnt64(t),
        Packet::Tip(ip),
        Packet::TipPge(ip),
        Packet::TipPgd(ip),
        Packet::Fup(ip),
        Packet::Pip { cr3: 0, nr: false },
        Packet::ModeExec {
            csl: false,
            csd: false,
            if_: false,
        },
        Packet::ModeTsx {
            intx: false,
            abrt: false,
        },
        Packet::TraceStop,
        Packet::Cbr { ratio: 0 },
        Packet::Tsc { tsc: 0 },
        Packet::Mtc { ctc: 0 },
        Packet::Tma { ctc: 0, fc: 0 },
        Packet::Cyc { value: 0 },
        Packet::Vmcs { base: 0 },
        Packet::Ovf,
        Packet::Psb,
        Packet::PsbEnd,
        Packet::Mnt { payload: 0 },
        Packet::Ptw {
            size: PtwSize::Four,
            payload: 0,
            ip: false,
        },
        Packet::Exstop { ip: false },
        Packet::Mwait { hints: 0, ext: 0 },
        Packet::Pwre {
            state: 0,
            sub_state: 0,
            hw: false,
        },
        Packet::Pwrx {
            last: 0,
            deepest: 0,
            wake: 0,
        },
        Packet::Bbp { sz4: false, ty: 0 },
        Packet::Bip {
            id: 0,
            payload: 0,
            sz4: false,
        },
        Packet::Bep { ip: false },
        Packet::Cfe {
            ty: 0,
            vector: 0,
            ip: false,
        },
        Packet::Evd { ty: 0, payload: 0 },
        Packet::Trig {
            trbv: 0,
            ip: false,
            mult: false,
            icnt: None,
        },
    ];
    let rows = packet_rows();
    let names: BTreeSet<String> = rows.iter().map(|(n, _)| n.clone()).collect();
    for p in every {
        assert!(
            names.contains(p.name()),
            "{} has no row in spec/packets.md",
            p.name()
        );
        // The JSON tag (`ptemu dump --json`) is the same name as the text form's.
        assert_eq!(serde_json::to_value(p).unwrap()["packet"], p.name());
    }
    assert_eq!(names.len(), every.len());
    let mut fns = test_fns();
    for entry in std::fs::read_dir(root().join("ptemu-core/src/packet")).unwrap() {
        let src = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for part in src.split("fn ").skip(1) {
            fns.insert(
                part.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect(),
            );
        }
    }
    let files = ["golden", "oracle", "props", "unit"];
    for (name, tests) in rows {
        for t in tests.split(',').map(|t| t.trim().trim_matches('`')) {
            assert!(
                files.contains(&t) || fns.contains(t),
                "{name}: test `{t}` does not exist"
            );
        }
    }
}

#[test]
fn every_generation_rule_is_in_the_spec_and_named_by_a_test_that_exists() {
    use ptemu::tracer::GenRule;
    let rows = rule_rows("generation.md");
    let ids: Vec<&str> = rows.iter().map(|(id, _)| id.as_str()).collect();
    let all: Vec<&str> = GenRule::ALL.iter().map(|r| r.id()).collect();
    assert_eq!(ids, all, "spec/generation.md rows and GenRule::ALL differ");
    assert_named_by_tests(&rows);
}

/// spec/simulate.md: every SIM rule is named by a test, and every test it lists exists.
#[test]
fn every_simulate_rule_is_named_by_a_test_that_exists() {
    assert_rules("simulate.md", &[("SIM", 22)]);
}

/// The `## Rules` tables of `spec/FILE` hold exactly PREFIX1..=N for each `(PREFIX, N)`, in that
/// order (other rows, such as a second table's header, aside), each named by a test, every test
/// listed existing.
fn assert_rules(file: &str, want: &[(&str, usize)]) {
    let rows: Vec<(String, Vec<String>)> = rule_rows(file)
        .into_iter()
        .filter(|(id, _)| {
            want.iter()
                .any(|(p, _)| id.strip_prefix(p).is_some_and(|n| n.parse::<u32>().is_ok()))
        })
        .collect();
    let ids: Vec<String> = rows.iter().map(|(id, _)| id.clone()).collect();
    let expected: Vec<String> = want
        .iter()
        .flat_map(|&(p, n)| (1..=n).map(move |k| format!("{p}{k}")))
        .collect();
    assert_eq!(ids, expected, "spec/{file} rows");
    assert_named_by_tests(&rows);
}

/// spec/hardware.md: the rules HW1..HW11 of its two rule tables (the tables of measurements
/// between them aside), each named by a test.
#[test]
fn every_hardware_rule_is_named_by_a_test() {
    let fns = test_fns();
    let mut ids = Vec::new();
    for heading in ["## Layout rules", "## Choice rules"] {
        for row in table_rows("hardware.md", heading) {
            let id = row.split(" | ").next().unwrap().trim_start_matches("| ").trim();
            if id.starts_with("HW") {
                ids.push(id.to_string());
            }
        }
    }
    let want: Vec<String> = (1..=11).map(|n| format!("HW{n}")).collect();
    assert_eq!(ids, want, "spec/hardware.md rows");
    for id in &ids {
        assert!(names_rule(&fns, id), "{id}: no test names it");
    }
}

/// spec/truth.md: the TR, FLT and CORP rules of its three tables (under one `## Rules` heading),
/// each named by a test, every test they list existing.
#[test]
fn every_truth_rule_is_named_by_a_test_that_exists() {
    assert_rules("truth.md", &[("TR", 16), ("FLT", 7), ("CORP", 3)]);
}

/// spec/perf-data.md: every PD rule is named by a test, and every test it lists exists.
#[test]
fn every_perf_data_rule_is_named_by_a_test_that_exists() {
    assert_rules("perf-data.md", &[("PD", 13)]);
}

/// spec/qemu.md: every QE rule is named by a test, and every test it lists exists.
#[test]
fn every_qemu_rule_is_named_by_a_test_that_exists() {
    assert_rules("qemu.md", &[("QE", 30)]);
}

/// spec/cpu-profiles.md: every CP rule is named by a test, and every test it lists exists.
#[test]
fn every_cpu_profile_rule_is_named_by_a_test_that_exists() {
    assert_rules("cpu-profiles.md", &[("CP", 8)]);
}

/// spec/picture.md: every PIC rule is named by a test, and every test it lists exists.
#[test]
fn every_picture_rule_is_named_by_a_test_that_exists() {
    assert_rules("picture.md", &[("PIC", 11)]);
}
