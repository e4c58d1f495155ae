//! spec/output.md is the contract: every rule ID in its table is named by a test, every test it lists
//! exists, and every rule ptemu reports (`Rule::ALL`) is in the table.

use ptemu::Rule;
use std::collections::BTreeSet;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// (rule ID, backtick-quoted names in its Tests cell) for each row of the `## Rules` table.
fn spec_rows() -> Vec<(String, Vec<String>)> {
    let spec = std::fs::read_to_string(root().join("spec/output.md")).unwrap();
    let table = spec
        .split("## Rules")
        .nth(1)
        .unwrap()
        .split("\n## ")
        .next()
        .unwrap();
    table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| ID") && !l.starts_with("|---"))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            let id = cells[0].trim_start_matches("| ").trim().to_string();
            let tests = cells.last().unwrap();
            let names = tests.split('`').skip(1).step_by(2).map(str::to_string).collect();
            (id, names)
        })
        .collect()
}

/// Names of every `fn` in tests/*.rs.
fn test_fns() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(root().join("tests")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let src = std::fs::read_to_string(&path).unwrap();
            for part in src.split("fn ").skip(1) {
                let name: String = part
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                names.insert(name);
            }
        }
    }
    names
}

#[test]
fn every_spec_rule_is_named_by_a_test() {
    let fns = test_fns();
    let rows = spec_rows();
    assert_eq!(rows.len(), Rule::ALL.len(), "spec table rows");
    let mut missing = Vec::new();
    for (id, _) in &rows {
        let token = id.to_ascii_lowercase();
        if !fns.iter().any(|f| f.split('_').any(|t| t == token)) {
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
