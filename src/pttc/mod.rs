//! `ptemu pttc`: libipt's test compiler. A `.ptt` file is yasm assembly whose comments carry
//! `@pt` directives (trace packets), `@sb` directives (sideband records) and `.exp` sections (the
//! output a decoder must give). [`run`] turns one into the files libipt's `pttc` writes, with the
//! same names and bytes: `<root>.bin` (what `yasm -f bin` writes), `<root>.pt`, one
//! `<root>-<tool>[-cpu_<f>_<m>[_<s>]].exp` per `.exp(tool)` section and the `.sb` files. It is
//! pure: no files are read or written here (spec/pttc.md).
//!
//! The parts: `parse` (lines, directives, yasm statements), `asm` (the instruction subset,
//! encoded with iced-x86), `image` (sections, layout, the flat binary), `listing` (the labels
//! as pttc reads them from yasm's listing), `directive` (`@pt` to packet bytes), `sideband`
//! (`@sb`), `exp` (`.exp` text), `ctext` (the C library's number and token rules pttc
//! inherits).

mod asm;
pub mod case;
mod ctext;
mod directive;
mod exp;
mod image;
mod listing;
mod parse;
mod sideband;

use listing::Labels;
use parse::Marker;
use std::fmt;

/// A CPU given with `--cpu f/m[/s]`: it only changes the .exp file names, as in pttc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cpu {
    /// Family.
    pub family: u16,
    /// Model.
    pub model: u8,
    /// Stepping; 0 leaves it out of the names.
    pub stepping: u8,
}

impl Cpu {
    /// Reads `f/m[/s]`, each number as C's `strtoull` with base 0 reads it (decimal, `0x` hex,
    /// `0` octal), as pttc does.
    pub fn parse(s: &str) -> Result<Cpu, String> {
        let bad = || format!("cpu must be given as f/m[/s], not '{s}'");
        let parts: Vec<&str> = s.split('/').collect();
        if !(2..=3).contains(&parts.len()) {
            return Err(bad());
        }
        let n = |p: &str, bits: u32| ctext::to_uint(p, bits).map_err(|_| bad());
        Ok(Cpu {
            family: n(parts[0], 16)? as u16,
            model: n(parts[1], 8)? as u8,
            stepping: match parts.get(2) {
                Some(p) => n(p, 8)? as u8,
                None => 0,
            },
        })
    }

    /// The `-cpu_<f>_<m>[_<s>]` part of an .exp file name.
    pub fn suffix(&self) -> String {
        if self.stepping != 0 {
            format!("-cpu_{}_{}_{}", self.family, self.model, self.stepping)
        } else {
            format!("-cpu_{}_{}", self.family, self.model)
        }
    }
}

/// How to run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// The CPU for the .exp file names (`None`: pttc's default, no suffix).
    pub cpu: Option<Cpu>,
}

/// One output file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputFile {
    /// Its name (no directory).
    pub name: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// What went wrong, and on which line of the .ptt file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PttcError {
    /// 1-based line number; 0 for the file as a whole.
    pub line: usize,
    /// The message.
    pub message: String,
}

impl PttcError {
    /// An error on `line` (1-based; 0: the whole file).
    pub fn new(line: usize, message: impl Into<String>) -> Self {
        PttcError {
            line,
            message: message.into(),
        }
    }

    /// The error as `FILE:LINE: message` (`FILE: message` for the whole file).
    pub fn located(&self, file: &str) -> String {
        match self.line {
            0 => format!("{file}: {}", self.message),
            n => format!("{file}:{n}: {}", self.message),
        }
    }
}

impl fmt::Display for PttcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            0 => f.write_str(&self.message),
            n => write!(f, "line {n}: {}", self.message),
        }
    }
}

impl std::error::Error for PttcError {}

fn at(line: usize) -> impl Fn(String) -> PttcError {
    move |message| PttcError::new(line, message)
}

/// An output name taken from the file (`.exp(NAME)`, `@sb primary(FORMAT SRC)`) must name a file
/// in the output directory: no `/`, no NUL.
fn plain_name(name: String, line: usize) -> Result<String, PttcError> {
    match name.contains(['/', '\0']) {
        true => Err(PttcError::new(
            line,
            format!("output name '{name}' is not a plain file name"),
        )),
        false => Ok(name),
    }
}

/// The root of the output names as pttc derives it from the path it is given: the path up to
/// its last `.`, then what follows the last `/` of that.
pub fn file_root(path: &str) -> &str {
    let stem = match path.rfind('.') {
        Some(dot) => &path[..dot],
        None => path,
    };
    match stem.rfind('/') {
        Some(slash) => &stem[slash + 1..],
        None => stem,
    }
}

/// The .exp file name for a `.exp(extra)` section.
pub fn exp_name(root: &str, extra: &str, cpu: Option<Cpu>) -> String {
    let cpu = cpu.map(|c| c.suffix()).unwrap_or_default();
    if extra.is_empty() {
        format!("{root}-{cpu}.exp")
    } else {
        format!("{root}-{extra}{cpu}.exp")
    }
}

/// Compiles the .ptt text `source`, read from `path`, into pttc's output files: the .bin, the
/// .pt, the .exp files in the order their sections first appear, then the .sb files.
pub fn run(path: &str, source: &str, options: &Options) -> Result<Vec<OutputFile>, PttcError> {
    compile(path, source, options).map(|c| c.files)
}

/// What [`compile`] gives: pttc's files and where the .bin is loaded.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The files [`run`] gives.
    pub files: Vec<OutputFile>,
    /// `org`: the address of the .bin's first byte.
    pub org: u64,
}

/// [`run`], also giving the .bin's load address.
pub fn compile(path: &str, source: &str, options: &Options) -> Result<Compiled, PttcError> {
    let root = file_root(path);
    let lines = parse::split_lines(source);
    let image = image::assemble(&lines)?;
    let org = image.org;
    let reading = listing::read(&image.lines)?;
    let yasm = &reading.labels;
    let mut directive_labels = Labels::default();
    let mut pt = Vec::new();
    let mut sb = sideband::Sideband::default();
    let sb_context = sideband::Context { root, labels: yasm };
    let mut exp_start = None;

    for (i, line) in lines.iter().enumerate().take(reading.lines_read) {
        let n = i + 1;
        let err = at(n);
        let Some(d) = parse::find_directive(line).map_err(&err)? else {
            continue;
        };
        if d.name.is_empty() {
            return Err(err("invalid syntax: no directive".into()));
        }
        if d.marker == Marker::Pt && d.name == ".exp" {
            directive_labels.add("eos", pt.len() as u64).map_err(&err)?;
            exp_start = Some((i, d.payload));
            break;
        }
        let mut name = d.name.as_str();
        if let Some(colon) = name.find(':') {
            let label = &name[..colon];
            name = name[colon + 1..].trim_start_matches(|c: char| c.is_ascii() && ctext::is_c_space(c as u8));
            if name.is_empty() {
                return Err(err("invalid syntax: a label without a directive".into()));
            }
            if yasm.get(label).is_some() {
                return Err(err(format!(
                    "label '{label}' is not unique: it is a yasm label too"
                )));
            }
            let offset = match d.marker {
                Marker::Pt => pt.len() as u64,
                Marker::Sb => sb.offset().map_err(&err)?,
            };
            directive_labels.add(label, offset).map_err(&err)?;
        }
        match d.marker {
            Marker::Pt => {
                let emit =
                    directive::packet(name, &d.payload, yasm).map_err(|m| err(format!("{name}: {m}")))?;
                pt.extend(emit.bytes().map_err(|m| err(format!("{name}: {m}")))?);
            }
            Marker::Sb => {
                sb.process(&sb_context, name, &d.payload)
                    .map_err(|m| err(format!("{name}: {m}")))?;
            }
        }
    }

    // The .exp files: every line after the first .exp directive, a new file at each further one.
    let mut exps: Vec<OutputFile> = Vec::new();
    if let Some((first, extra)) = exp_start {
        let mut current = plain_name(exp_name(root, &extra, options.cpu), first + 1)?;
        let mut text = String::new();
        let flush = |name: &str, text: &mut String, exps: &mut Vec<OutputFile>| {
            let bytes = std::mem::take(text).into_bytes();
            // Opening a name again starts it over, as fopen("w") does.
            match exps.iter_mut().find(|f| f.name == name) {
                Some(f) => f.bytes = bytes,
                None => exps.push(OutputFile {
                    name: name.to_string(),
                    bytes,
                }),
            }
        };
        for (i, line) in lines.iter().enumerate().take(reading.lines_read).skip(first + 1) {
            let err = at(i + 1);
            if let Some(d) = parse::find_directive(line).map_err(&err)? {
                if d.name == ".exp" {
                    flush(&current, &mut text, &mut exps);
                    current = plain_name(exp_name(root, &d.payload, options.cpu), i + 1)?;
                    continue;
                }
            }
            if let Some(l) =
                exp::render_line(line, yasm, &directive_labels).map_err(|m| err(format!("{current}: {m}")))?
            {
                text.push_str(&l);
                text.push('\n');
            }
        }
        flush(&current, &mut text, &mut exps);
    }

    let mut files = vec![
        OutputFile {
            name: format!("{root}.bin"),
            bytes: image.bin,
        },
        OutputFile {
            name: format!("{root}.pt"),
            bytes: pt,
        },
    ];
    files.extend(exps);
    files.extend(
        sb.into_files()
            .into_iter()
            .map(|(name, bytes)| OutputFile { name, bytes }),
    );
    Ok(Compiled { files, org })
}

/// The files `--case` adds to `compiled` (spec/pttc.md, "`--case`"): `trace.pt`, `image.bin`,
/// `image.json`, `case.json` and `truth.jsonl` from the `.exp(ptxed)` section. `cpu` is `--cpu`
/// (`Some(None)`: `--cpu none`; `None`: not given, so the first `; cpu` line's). A file
/// without an `.exp(ptxed)` section is an error: there is nothing to check a decoder against.
pub fn case_files(
    path: &str,
    source: &str,
    compiled: &Compiled,
    cpu: Option<Option<Cpu>>,
) -> Result<(Vec<OutputFile>, case::CaseRun), PttcError> {
    let root = file_root(path);
    let name = exp_name(root, "ptxed", cpu.flatten());
    let exp = compiled
        .files
        .iter()
        .find(|f| f.name == name)
        .ok_or_else(|| PttcError::new(0, "--case: the file has no .exp(ptxed) section"))?;
    let file = |n: String| compiled.files.iter().find(|f| f.name == n).map(|f| &f.bytes[..]);
    let lines = parse::split_lines(source);
    case::files(&case::CaseInput {
        path,
        lines: &lines,
        bin: file(format!("{root}.bin")).unwrap_or_default(),
        org: compiled.org,
        pt: file(format!("{root}.pt")).unwrap_or_default(),
        exp: &String::from_utf8_lossy(&exp.bytes),
        cpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = "org 0x1000\nbits 64\n; @pt p1: psb()\n; @pt p2: fup(3: %l1)\n; @pt psbend()\nl1: nop\nl2: hlt\n; @pt p3: tip.pgd(0: 0)\n; @pt .exp(ptdump)\n;%0p1 psb\n;%0p2 fup 3: %0l1\n;%0p3 tip.pgd # off\n;eos %eos\n; @pt .exp()\n;%?l2.2\n";

    #[test]
    fn names() {
        assert_eq!(file_root("dir/sub/a-b.ptt"), "a-b");
        assert_eq!(file_root("a.b/c"), "a");
        assert_eq!(exp_name("t", "ptxed", None), "t-ptxed.exp");
        assert_eq!(exp_name("t", "", None), "t-.exp");
        let cpu = Cpu::parse("6/142").unwrap();
        assert_eq!(exp_name("t", "ptxed", Some(cpu)), "t-ptxed-cpu_6_142.exp");
        assert_eq!(
            exp_name("t", "", Some(Cpu::parse("6/142/9").unwrap())),
            "t--cpu_6_142_9.exp"
        );
        assert!(Cpu::parse("6").is_err());
    }

    #[test]
    fn a_whole_file() {
        let files = run("x/small.ptt", SMALL, &Options::default()).unwrap();
        let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["small.bin", "small.pt", "small-ptdump.exp", "small-.exp"]);
        assert_eq!(files[0].bytes, [0x90, 0xf4]);
        let mut pt = [2u8, 0x82].repeat(8);
        pt.extend([0x7d, 0x00, 0x10, 0, 0, 0, 0, 0x02, 0x23, 0x01]);
        assert_eq!(files[1].bytes, pt);
        assert_eq!(
            String::from_utf8(files[2].bytes.clone()).unwrap(),
            "0000000000000000 psb\n0000000000000010 fup 3: 0000000000001000\n0000000000000019 tip.pgd\neos 1a\n"
        );
        assert_eq!(
            String::from_utf8(files[3].bytes.clone()).unwrap(),
            "????????????1001\n"
        );
    }

    /// The error `run` gives for `src`: its line and message.
    fn error(src: &str) -> (usize, String) {
        let e = run("t.ptt", src, &Options::default()).unwrap_err();
        (e.line, e.message)
    }

    #[test]
    fn errors_name_the_line() {
        assert_eq!(error("org 0\nbits 64\n; @pt frob()\n").0, 3);
        let (line, msg) = error("org 0\nbits 64\n; @pt fup(3: %nowhere)\n");
        assert!(line == 3 && msg.contains("nowhere"), "{line} {msg}");
        assert_eq!(error("org 0\nbits 64\nl1: nop\n; @pt l1: psb()\n").0, 4);
        assert_eq!(error("org 0\nbits 64\n; @pt .exp(x)\n; %nowhere\n").0, 4);
    }

    /// Input that used to panic, take forever or write outside the output directory is an
    /// error on its line.
    #[test]
    fn hostile_input_is_an_error_on_its_line() {
        for (src, line, words) in [
            ("org 0\nbits 64\ncall nowhere\n", 3, "undefined label 'nowhere'"),
            (
                "org 0\nbits 64\nl1: jmp l1\n times 20000000 jmp l1\n",
                4,
                "at most",
            ),
            ("org 0\nbits 64\ntimes 0xffffffffffffffff nop\n", 3, "bytes"),
            ("org 0\nbits 64\ntimes 0x200000000 db 0\n", 3, "bytes"),
            ("org 0\nbits 64\nALIGN 0x8000000000000000\n", 3, "ALIGN"),
            ("org 0xffffffffffffffff\nbits 64\nnop\n", 1, "past 2^64"),
            ("org 0\nbits 64\ndb --1\n", 3, ""),
            ("org 0\nbits 64\n; @pt .exp(a/../x)\n", 3, "plain file name"),
            ("org 0\nbits 64\n; @sb primary(raw ../x)\n", 3, "plain file name"),
        ] {
            let (l, msg) = error(src);
            assert!(l == line && msg.contains(words), "{src:?}: line {l}: {msg}");
        }
    }
}
