//! `ptemu pttc --case`: a compiled .ptt test as a case `ptemu verify` and the libipt harness
//! (`examples/libipt_decode.rs`) read (spec/pttc.md, "`--case`"): `trace.pt` (the .pt),
//! `image.bin` and `image.json` (the .bin at `org`), `case.json` (the CPU, address filter and
//! timing ptxed is told, from `--cpu` and the `; opt:ptxed` lines) and `truth.jsonl`, built
//! from the `.exp(ptxed)` text: what libipt's ptxed must print.

use super::{Cpu, OutputFile, PttcError};
use crate::truth::json::{header_line, put_record};
use crate::truth::mark::Text;
use crate::truth::record::{Class, Record};
use crate::truth::{Cause, Counts};

/// What ptxed is told for a test: the `; opt:ptxed` options a case records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PtxedOptions {
    /// Every option word, in order, as the `; opt:ptxed` lines give them.
    pub words: Vec<String>,
    /// `--cpu f/m[/s]` among them (`Some(None)`: `--cpu none`).
    pub cpu: Option<Option<Cpu>>,
    /// `--filter:addrN_cfg`: CTL\[47:32\] as libipt holds it.
    pub addr_cfg: u64,
    /// `--filter:addrN_a` / `_b`: ADDR0_A, ADDR0_B, ... ADDR3_B.
    pub addr: [u64; 8],
    /// `--mtc-freq`, `--nom-freq`, `--cpuid-0x15.eax`, `--cpuid-0x15.ebx` (0 when not given,
    /// as ptxed leaves them).
    pub timing: [u64; 4],
    /// `--event:ip`: event lines carry their IPs.
    pub event_ip: bool,
    /// `--event:tick`: tick events are asked for.
    pub tick: bool,
    /// `--event:iflags`: interrupt-flag events are asked for.
    pub iflags: bool,
    /// `--insn:keep-tcal-on-ovf`.
    pub keep_tcal: bool,
    /// `--quiet` (`-q`): no instruction or event lines.
    pub quiet: bool,
    /// `--stat`, `--stat:insn`, `--stat:blocks` given: (any statistic, the instruction count).
    pub stat: (bool, bool),
}

/// The options of the `; opt:ptxed` lines of `lines` (libipt's test.bash reads them with
/// `sed 's/[ \t]*;[ \t]*opt:ptxed[ \t][ \t]*\(.*\)/\1/'`). Bad numbers are errors on their line.
pub fn ptxed_options(lines: &[&str]) -> Result<PtxedOptions, PttcError> {
    let mut o = PtxedOptions::default();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = directive_line(line, "opt:ptxed") else {
            continue;
        };
        let words: Vec<&str> = rest.split_ascii_whitespace().collect();
        let bad = |m: String| PttcError::new(i + 1, m);
        let number = |w: Option<&&str>, what: &str| -> Result<u64, PttcError> {
            w.and_then(|w| super::ctext::to_uint(w, 64).ok())
                .ok_or_else(|| bad(format!("opt:ptxed: {what} needs a number")))
        };
        let mut k = 0;
        while k < words.len() {
            let w = words[k];
            let value = words.get(k + 1);
            let mut takes = true;
            match w {
                "--cpu" => {
                    let v = value.ok_or_else(|| bad("opt:ptxed: --cpu needs f/m[/s]".into()))?;
                    o.cpu = Some(match *v {
                        "none" => None,
                        c => Some(Cpu::parse(c).map_err(|m| bad(format!("opt:ptxed: {m}")))?),
                    });
                }
                "--mtc-freq" => o.timing[0] = number(value, w)?,
                "--nom-freq" => o.timing[1] = number(value, w)?,
                "--cpuid-0x15.eax" => o.timing[2] = number(value, w)?,
                "--cpuid-0x15.ebx" => o.timing[3] = number(value, w)?,
                _ if w.starts_with("--filter:addr") => {
                    let spec = &w["--filter:addr".len()..];
                    let (n, field) = spec
                        .split_once('_')
                        .and_then(|(n, f)| Some((n.parse::<usize>().ok().filter(|&n| n < 4)?, f)))
                        .ok_or_else(|| bad(format!("opt:ptxed: unknown option {w}")))?;
                    let v = number(value, w)?;
                    match field {
                        "cfg" => o.addr_cfg = o.addr_cfg & !(0xf << (4 * n)) | (v & 0xf) << (4 * n),
                        "a" => o.addr[2 * n] = v,
                        "b" => o.addr[2 * n + 1] = v,
                        _ => return Err(bad(format!("opt:ptxed: unknown option {w}"))),
                    }
                }
                _ => {
                    takes = matches!(
                        w,
                        "--pevent:kernel-start" | "--iscache-limit" | "--pevent:sysroot"
                    );
                    match w {
                        "--event:ip" => o.event_ip = true,
                        "--event:tick" => o.tick = true,
                        "--event:iflags" => o.iflags = true,
                        "--insn:keep-tcal-on-ovf" => o.keep_tcal = true,
                        "--quiet" | "-q" => o.quiet = true,
                        "--stat" => o.stat.0 = true,
                        "--stat:insn" => o.stat = (true, true),
                        "--stat:blocks" => o.stat.0 = true,
                        _ => {}
                    }
                }
            }
            o.words.push(w.to_string());
            if takes {
                if let Some(v) = value {
                    o.words.push(v.to_string());
                }
                k += 1;
            }
            k += 1;
        }
    }
    Ok(o)
}

/// The first `; cpu f/m` line's CPU (test.bash runs the test once per such line).
pub fn first_cpu(lines: &[&str]) -> Result<Option<Cpu>, PttcError> {
    for (i, line) in lines.iter().enumerate() {
        if let Some(rest) = directive_line(line, "cpu") {
            let word = rest.split_ascii_whitespace().next().unwrap_or("");
            return Cpu::parse(word).map(Some).map_err(|m| PttcError::new(i + 1, m));
        }
    }
    Ok(None)
}

/// What follows `;`, blanks, `name` and at least one blank on `line`, if that is how it starts.
fn directive_line<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let blank = |c: char| c == ' ' || c == '\t';
    let rest = line.trim_start_matches(blank).strip_prefix(';')?;
    let rest = rest.trim_start_matches(blank).strip_prefix(name)?;
    rest.starts_with(blank).then(|| rest.trim_matches(blank))
}

/// One line of ptxed's output, as the truth reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PtxedLine {
    /// An instruction (`--no-inst`: its IP, `? ` before a speculative one).
    Insn {
        /// Its IP.
        ip: u64,
        /// Printed with `? `.
        speculative: bool,
    },
    /// A decode error: `[offset, ip: error: message]` (also `sync error`, `resync error`, ...).
    Error {
        /// What follows `error: `.
        message: String,
    },
    /// `[enabled]` / `[resumed]`, `[disabled]`, `[interrupt]`, `[overflow]` (TR10), with the IP
    /// fields printed.
    Event {
        /// Its word.
        word: String,
        /// `ip:` (`from:` of an interrupt), if printed.
        ip: Option<u64>,
        /// `to:` of an interrupt, if printed.
        to: Option<u64>,
    },
    /// Any other bracketed event (TR11): its words without the IP fields, and the IP.
    Mark {
        /// The words.
        words: String,
        /// The IP field, if printed.
        ip: Option<u64>,
    },
    /// `[end of trace]`.
    End,
    /// What is not about the trace's flow: `[block]` (`--block:show-blocks`), sideband lines,
    /// statistics (`insn: 4.`), ptxed's own messages.
    Other,
}

/// 16 hex digits, ptxed's `%016` form.
fn hex16(w: &str) -> Option<u64> {
    (w.len() == 16 && w.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| u64::from_str_radix(w, 16).ok())
        .flatten()
}

/// Reads one line of ptxed's output (spec/pttc.md, "`--case`").
pub fn read_ptxed_line(line: &str) -> PtxedLine {
    let line = line.trim();
    if let Some(inner) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
        if inner.contains("sideband") || inner.starts_with("context:") || inner == "block" {
            return PtxedLine::Other;
        }
        if let Some(at) = inner.find("error: ") {
            if inner[..at].contains(':') {
                return PtxedLine::Error {
                    message: inner[at + "error: ".len()..].to_string(),
                };
            }
        }
        if inner == "end of trace" {
            return PtxedLine::End;
        }
        // ptxed's --offset and --event:time columns, then the words and the fields.
        let mut rest = inner;
        while let Some((w, tail)) = rest.split_once(' ') {
            if hex16(w).is_none() {
                break;
            }
            rest = tail.trim_start();
        }
        let mut parts = rest.split(", ");
        let first = parts.next().unwrap_or("").to_string();
        let (mut ip, mut to) = (None, None);
        let mut words = vec![first.clone()];
        for part in parts {
            let field = part.split_once(": ").and_then(|(k, v)| {
                matches!(k, "ip" | "at" | "from" | "to")
                    .then(|| Some((k, u64::from_str_radix(v, 16).ok()?)))
                    .flatten()
            });
            match field {
                Some(("to", v)) => to = Some(v),
                Some((k, v)) => {
                    // `at:` of an asynchronous disable comes before its `ip:`.
                    if k != "at" || ip.is_none() {
                        ip = ip.or(Some(v));
                    }
                }
                None => words.push(part.to_string()),
            }
        }
        return match first.as_str() {
            "enabled" | "resumed" | "disabled" | "interrupt" | "overflow" if words.len() == 1 => {
                PtxedLine::Event { word: first, ip, to }
            }
            _ => PtxedLine::Mark {
                words: words.join(", "),
                ip: ip.or(to),
            },
        };
    }
    let mut words = line.split_ascii_whitespace();
    let (speculative, w) = match words.next() {
        Some("?") => (true, words.next()),
        w => (false, w),
    };
    match (w.and_then(hex16), words.next()) {
        (Some(ip), None) => PtxedLine::Insn { ip, speculative },
        _ => PtxedLine::Other,
    }
}

/// The truth of a ptxed expectation (TR1, TR2, TR10, TR11): every instruction line an `insn`
/// record, required, its carrier unknown (`off` null); each event line an `enable`, `disable`,
/// `async` or `overflow` record, each other bracketed line a `mark`, in the order ptxed prints
/// them, with the IPs printed (an IP not printed is the next instruction's, or 0: a harness told
/// the same options does not print it either, so it is not checked); each error line an empty
/// `corrupt` span, whose error a decoder must report. Events and marks are delivered where
/// their packet lies is not known: `off` 0 (verify expects only delivered events, `off` not
/// null). `run` goes in the header.
pub fn truth(exp: &str, stream_len: u64, run: serde_json::Value) -> Vec<u8> {
    let lines: Vec<PtxedLine> = exp.lines().map(read_ptxed_line).collect();
    let next_ip = |k: usize| {
        lines[k + 1..].iter().find_map(|l| match l {
            PtxedLine::Insn { ip, .. } => Some(*ip),
            _ => None,
        })
    };
    let prev_ip = |k: usize| {
        lines[..k].iter().rev().find_map(|l| match l {
            PtxedLine::Insn { ip, .. } => Some(*ip),
            _ => None,
        })
    };
    let mut out = header_line(&serde_json::json!({
        "generated": stream_len,
        "delivered": stream_len,
        "truncated": false,
        "damage": [],
        "run": run,
    }))
    .into_bytes();
    let mut counts = Counts::default();
    let mut put = |r: Record, out: &mut Vec<u8>| {
        counts.add(&r);
        put_record(out, &r);
    };
    let mut i = 0;
    for (k, l) in lines.iter().enumerate() {
        let r = match l {
            PtxedLine::Insn { ip, .. } => {
                i += 1;
                Record::Insn {
                    i: i - 1,
                    ip: *ip,
                    branch: None,
                    off: None,
                    class: Class::Required,
                }
            }
            PtxedLine::Error { .. } => Record::Span {
                cause: Cause::Corrupt,
                first: i,
                resume: None,
            },
            PtxedLine::Event { word, ip, to } => match word.as_str() {
                "enabled" | "resumed" => Record::Enable {
                    ip: ip.or_else(|| next_ip(k)).unwrap_or(0),
                    off: Some(0),
                },
                "disabled" => Record::Disable { off: Some(0) },
                "interrupt" => Record::Async {
                    from: ip.or_else(|| prev_ip(k)).unwrap_or(0),
                    to: to.or_else(|| next_ip(k)).unwrap_or(0),
                    off: Some(0),
                },
                _ => Record::Overflow { off: Some(0) },
            },
            PtxedLine::Mark { words, ip } => match Text::new(words) {
                Some(text) => Record::Mark {
                    text,
                    ip: *ip,
                    off: Some(0),
                    early: 0,
                    restated: false,
                },
                None => continue,
            },
            PtxedLine::End | PtxedLine::Other => continue,
        };
        put(r, &mut out);
    }
    put_record(&mut out, &Record::End { counts });
    out
}

/// Everything of a case: what [`super::compile`] gave, the .ptt's lines, and how it was asked.
#[derive(Debug)]
pub struct CaseInput<'a> {
    /// The .ptt's path as given (for the header).
    pub path: &'a str,
    /// Its lines.
    pub lines: &'a [&'a str],
    /// The .bin.
    pub bin: &'a [u8],
    /// Where the .bin is loaded.
    pub org: u64,
    /// The .pt.
    pub pt: &'a [u8],
    /// The `.exp(ptxed)` text.
    pub exp: &'a str,
    /// `--cpu` (`Some(None)`: `--cpu none`; `None`: not given, the first `; cpu` line).
    pub cpu: Option<Option<Cpu>>,
}

/// What a case says of the run its decoders must assume, as `case.json` writes it: for writers
/// of other outputs of the same case (`ptemu pttc --perf-data`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseRun {
    /// The test's name (the .ptt's root), as `case.json`'s `name`.
    pub name: String,
    /// The CPU: `opt:ptxed --cpu`, else `--cpu`, else the first `; cpu` line.
    pub cpu: Option<Cpu>,
    /// IA32_RTIT_CTL with the `--filter:addrN_cfg` fields (bits 47:32), nothing else.
    pub ctl: u64,
    /// The ADDRn MSRs the `--filter:addrN_a/_b` options set, as (MSR, value).
    pub msrs: Vec<(u32, u64)>,
}

/// The files `--case` adds: `trace.pt`, `image.bin`, `image.json`, `case.json`, `truth.jsonl`;
/// and the run they describe.
pub fn files(c: &CaseInput) -> Result<(Vec<OutputFile>, CaseRun), PttcError> {
    let opts = ptxed_options(c.lines)?;
    // test.bash puts the `; cpu` line's --cpu before the opt:ptxed options: theirs wins.
    let cpu = match (opts.cpu, c.cpu) {
        (Some(cpu), _) | (None, Some(cpu)) => cpu,
        (None, None) => first_cpu(c.lines)?,
    };
    let cpu_text = cpu.map(|c| match c.stepping {
        0 => format!("{}/{}", c.family, c.model),
        s => format!("{}/{}/{s}", c.family, c.model),
    });
    let case_run = CaseRun {
        name: super::file_root(c.path).to_string(),
        cpu,
        ctl: opts.addr_cfg << 32,
        msrs: opts
            .addr
            .iter()
            .enumerate()
            .filter(|(_, &v)| v != 0)
            .map(|(k, &v)| (crate::regs::msr::IA32_RTIT_ADDR0_A + k as u32, v))
            .collect(),
    };
    let msrs: Vec<serde_json::Value> = case_run
        .msrs
        .iter()
        .map(|(msr, v)| serde_json::json!({"msr": format!("{msr:#x}"), "value": format!("{v:#x}")}))
        .collect();
    let run = serde_json::json!({
        "input": c.path,
        "format": "ptt",
        "cpu": cpu_text,
        "cpu_signature": cpu.map(|c| serde_json::json!({
            "family": c.family, "model": c.model, "stepping": c.stepping,
        })),
        "ctl": format!("{:#x}", case_run.ctl),
        "msrs": msrs,
        "ptxed": opts.words,
    });
    let case = serde_json::json!({
        "name": case_run.name,
        "run": run,
        "timing": {
            "mtc_freq": opts.timing[0],
            "nom_freq": opts.timing[1],
            "cpuid_0x15_eax": opts.timing[2],
            "cpuid_0x15_ebx": opts.timing[3],
        },
        "style": {
            "ptxed": true,
            "event_ip": opts.event_ip,
            "tick": opts.tick,
            "iflags": opts.iflags,
            "keep_tcal": opts.keep_tcal,
            "quiet": opts.quiet,
            // ptxed's --stat alone counts instructions (and blocks, for its block decoder).
            "stat_insn": opts.stat.1 || (opts.stat.0 && !opts.words.iter().any(|w| w == "--stat:blocks")),
        },
        "ptxed": format!(
            "ptxed --raw image.bin:{:#x}{}{} --no-inst --check --pt trace.pt",
            c.org,
            cpu_text.as_ref().map(|c| format!(" --cpu {c}")).unwrap_or_default(),
            opts.words.iter().map(|w| format!(" {w}")).collect::<String>()
        ),
    });
    let file = |name: &str, bytes: Vec<u8>| OutputFile {
        name: name.into(),
        bytes,
    };
    let json = |v: &serde_json::Value| format!("{v:#}\n").into_bytes();
    let files = vec![
        file("trace.pt", c.pt.to_vec()),
        file("image.bin", c.bin.to_vec()),
        file(
            "image.json",
            json(&serde_json::json!({"base": format!("{:#x}", c.org)})),
        ),
        file("case.json", json(&case)),
        file("truth.jsonl", truth(c.exp, c.pt.len() as u64, run)),
    ];
    Ok((files, case_run))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxed_lines() {
        assert_eq!(
            read_ptxed_line("? 0000000000001000"),
            PtxedLine::Insn {
                ip: 0x1000,
                speculative: true
            }
        );
        assert_eq!(
            read_ptxed_line("[1a, 100100: error: no memory mapped at this address]"),
            PtxedLine::Error {
                message: "no memory mapped at this address".into()
            }
        );
        assert!(matches!(
            read_ptxed_line("[0, 0: sync error: no sync]"),
            PtxedLine::Error { .. }
        ));
        assert_eq!(
            read_ptxed_line("[interrupt, from: 0000000000001002, to: 0000000000002000]"),
            PtxedLine::Event {
                word: "interrupt".into(),
                ip: Some(0x1002),
                to: Some(0x2000)
            }
        );
        assert_eq!(
            read_ptxed_line("[interrupt 14, cr2: 0000000000f00baa]"),
            PtxedLine::Mark {
                words: "interrupt 14, cr2: 0000000000f00baa".into(),
                ip: None
            }
        );
        assert_eq!(read_ptxed_line("[block]"), PtxedLine::Other);
        assert_eq!(read_ptxed_line("insn: 4."), PtxedLine::Other);
        assert_eq!(read_ptxed_line("[end of trace]"), PtxedLine::End);
    }

    #[test]
    fn options_and_cpu() {
        let lines = [
            "; cpu 6/142",
            "; opt:ptxed --filter:addr0_cfg 1 --filter:addr0_a 0x1000 --event:ip",
            ";   opt:ptxed --quiet --stat --stat:insn --mtc-freq 4",
        ];
        let o = ptxed_options(&lines).unwrap();
        assert_eq!((o.addr_cfg, o.addr[0], o.timing[0]), (1, 0x1000, 4));
        assert!(o.event_ip && !o.tick);
        assert_eq!(first_cpu(&lines).unwrap(), Cpu::parse("6/142").ok());
        assert_eq!(ptxed_options(&["; opt:ptxed --mtc-freq x"]).unwrap_err().line, 1);
    }

    #[test]
    fn a_truth_from_ptxed_text() {
        let t = truth(
            "[enabled]\n0000000000001000\n[exec mode: 64-bit]\n[2, 1001: error: boom]\n[disabled]\n",
            10,
            serde_json::json!({}),
        );
        let t = String::from_utf8(t).unwrap();
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("{\"truth\":2") || lines[0].contains("\"truth\":2"));
        assert_eq!(lines[1], r#"{"k":"enable","ip":"0x1000","off":0}"#);
        assert_eq!(lines[2], r#"{"k":"insn","i":0,"ip":"0x1000","off":null}"#);
        assert!(lines[3].contains("exec mode: 64-bit"));
        assert!(lines[4].contains("\"cause\":\"corrupt\"") && lines[4].contains("required"));
        assert_eq!(lines[5], r#"{"k":"disable","off":0}"#);
        assert!(lines[6].starts_with(r#"{"k":"end""#));
    }
}
