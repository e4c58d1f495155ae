//! `verify`'s block walk (issue 51 §5; spec/truth.md TR8, TR15) against its walk one step a
//! line, the reference: on random truths of blocks (runs of random blocks in every class, spans,
//! marks, times, events and single instructions between them) and decoder outputs made from
//! them (exact, cut short, one IP changed, one line left out; in every IP form TR8 reads, with
//! other lines between, read through buffers of every size), both give the same verdict: the
//! same counts, divergence (its line, the truth instruction, the stream offset) and work, or
//! the same error.

use proptest::prelude::*;
use ptemu::tracer::{Block, BlockEnd};
use ptemu::truth::compact::Encoder;
use ptemu::truth::mark::Text;
use ptemu::truth::record::{Branch, BranchKind, Class, Record, Run, Sink};
use ptemu::truth::verify::{check_per_instruction, check_with, Options, Pattern, Unchecked, Verdict};
use ptemu::truth::{Cause, Counts};
use std::io::BufReader;

/// A small generator (xorshift), seeded by proptest.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

/// What a correct decoder prints for a stretch of the truth, in order.
#[derive(Clone, Debug)]
enum Says {
    /// An instruction at this IP.
    Ip(u64),
    /// A line `error`.
    Error,
    /// An event or mark line, as ptxed prints it (with `--events`).
    Event(String),
    /// The decoder prints this IP or not: a lost instruction it may come back at (TR12), an
    /// undefined one (TR5).
    Maybe(u64),
}

/// A random truth (`truth.bin` bytes) and what a correct decoder says for it.
fn random_truth(rng: &mut Rng) -> (Vec<u8>, Vec<Says>) {
    // Blocks, a few of them starting at the same IP (the run's block is then not predicted).
    let nblocks = 1 + rng.below(8) as usize;
    let mut starts: Vec<u64> = (0..nblocks).map(|k| 0x40_0000 + 0x100 * k as u64).collect();
    if nblocks > 2 && rng.one_in(2) {
        starts[1] = starts[0];
    }
    let blocks: Vec<Block> = starts
        .iter()
        .map(|&start| {
            let lens: Vec<u8> = (0..1 + rng.below(6)).map(|_| 1 + rng.below(15) as u8).collect();
            let target = starts[rng.below(nblocks as u64) as usize];
            let end = match rng.below(7) {
                0 => BlockEnd::Conditional { target },
                1 => BlockEnd::Jump { target },
                2 => BlockEnd::Call { target },
                3 => BlockEnd::IndirectJump,
                4 => BlockEnd::IndirectCall,
                5 => BlockEnd::Return,
                _ => BlockEnd::FallThrough,
            };
            Block::new(start, &lens, end).unwrap()
        })
        .collect();
    let mut enc = Encoder::new(Vec::new());
    let truncated = rng.one_in(4);
    enc.header(&serde_json::json!({"truncated": truncated, "run": {}}))
        .unwrap();
    for b in &blocks {
        enc.block(b).unwrap();
    }
    let mut says = Vec::new();
    let mut counts = Counts::default();
    let (mut i, mut off) = (0u64, 10u64);
    let mut class = Class::Required;
    let mut tsc = 0x1000u64;
    let record = |enc: &mut Encoder<Vec<u8>>, counts: &mut Counts, r: Record| {
        counts.add(&r);
        enc.record(&r).unwrap();
    };
    for _ in 0..rng.below(60) {
        match rng.below(20) {
            // Runs, most of the time.
            0..=10 => {
                let k = rng.below(nblocks as u64) as usize;
                let b = &blocks[k];
                let next = match b.end() {
                    BlockEnd::Conditional { target } if rng.one_in(2) => target,
                    BlockEnd::Jump { target } | BlockEnd::Call { target } => target,
                    BlockEnd::IndirectJump | BlockEnd::IndirectCall | BlockEnd::Return => {
                        starts[rng.below(nblocks as u64) as usize] + rng.below(3)
                    }
                    _ => b.fall_through(),
                };
                if rng.one_in(3) {
                    off += 1 + rng.below(4);
                }
                let run = Run {
                    i,
                    block: k as u32,
                    n: b.instructions() as u32,
                    next,
                    off: (!rng.one_in(10)).then_some(off),
                    class,
                };
                counts.add_run(&run);
                enc.run(&run).unwrap();
                run.each_insn(b, |r| {
                    if let Record::Insn { ip, .. } = r {
                        says.push(match class {
                            Class::Required | Class::Optional => Says::Ip(ip),
                            _ => Says::Maybe(ip),
                        });
                    }
                });
                i += u64::from(run.n);
            }
            // An instruction of its own.
            11 => {
                let ip = 0x50_0000 + rng.below(64);
                let branch = rng.one_in(2).then(|| Branch {
                    kind: BranchKind::ALL[rng.below(7) as usize],
                    to: starts[0],
                    taken: true,
                });
                record(
                    &mut enc,
                    &mut counts,
                    Record::Insn {
                        i,
                        ip,
                        branch,
                        off: Some(off),
                        class,
                    },
                );
                says.push(match class {
                    Class::Required | Class::Optional => Says::Ip(ip),
                    _ => Says::Maybe(ip),
                });
                i += 1;
            }
            // A span: what follows is lost or undefined.
            12 | 13 => {
                let cause = Cause::ALL[rng.below(6) as usize];
                record(
                    &mut enc,
                    &mut counts,
                    Record::Span {
                        cause,
                        first: i,
                        resume: rng.one_in(2).then_some(off + 50),
                    },
                );
                class = if cause.undefined() {
                    Class::Undefined(cause)
                } else {
                    Class::Lost(cause)
                };
                if cause.error_required() {
                    says.push(Says::Error);
                }
            }
            // Back to required or optional instructions.
            14 => class = Class::Required,
            15 => class = Class::Optional,
            16 => {
                let n = rng.below(100);
                let text = Text::new(&format!("ptwrite: {n:x}")).unwrap();
                let ip = rng.one_in(2).then_some(0x40_0000 + rng.below(16));
                record(
                    &mut enc,
                    &mut counts,
                    Record::Mark {
                        text,
                        ip,
                        off: (!rng.one_in(8)).then_some(off),
                        early: rng.below(3),
                        restated: rng.one_in(4),
                    },
                );
                says.push(Says::Event(match ip {
                    Some(ip) => format!("[ptwrite: {n:x}, ip: {ip:016x}]"),
                    None => format!("[ptwrite: {n:x}]"),
                }));
            }
            17 => {
                tsc += rng.below(0x100);
                record(
                    &mut enc,
                    &mut counts,
                    Record::Time {
                        tsc,
                        slack: rng.below(4),
                        off: Some(off),
                    },
                );
            }
            18 => {
                let ip = starts[rng.below(nblocks as u64) as usize];
                let (r, line) = match rng.below(4) {
                    0 => (
                        Record::Enable { ip, off: Some(off) },
                        format!("[enabled, ip: {ip:016x}]"),
                    ),
                    1 => (Record::Disable { off: Some(off) }, "[disabled]".to_string()),
                    2 => (
                        Record::Async {
                            from: ip + 1,
                            to: ip,
                            off: Some(off),
                        },
                        format!("[interrupt, from: {:016x}, to: {ip:016x}]", ip + 1),
                    ),
                    _ => (Record::Overflow { off: Some(off) }, "[overflow]".to_string()),
                };
                record(&mut enc, &mut counts, r);
                says.push(Says::Event(line));
            }
            _ => off += rng.below(1000),
        }
    }
    enc.record(&Record::End { counts }).unwrap();
    enc.finish().unwrap();
    (enc.into_inner(), says)
}

/// One instruction line for `ip`, in one of the forms TR8 reads (and a bare hex word that may
/// not be one, when it has no decimal digit).
fn ip_line(rng: &mut Rng, ip: u64) -> String {
    match rng.below(10) {
        0 => format!("{ip:016x}  mov eax, 1"),
        1 => format!("{ip:>16x}"),
        2 => format!("{ip:x}"),
        3 => format!("0X{ip:X}\r"),
        4 => format!("   0x{ip:x}  # comment"),
        5 => format!("0x{ip:016X}"),
        6 => format!("0x{ip:x}\tjmp 0x{:x}", ip + 2),
        _ => format!("0x{ip:x}"),
    }
}

/// The decoder's output for what it says: every IP and event in its place, each `Maybe` given
/// or not, other lines here and there; then one of the changes (exact, cut short, one IP
/// changed, one line left out).
fn output(rng: &mut Rng, says: &[Says], events: bool) -> Vec<u8> {
    let mut lines: Vec<String> = Vec::new();
    for s in says {
        match *s {
            Says::Ip(ip) => lines.push(ip_line(rng, ip)),
            Says::Maybe(ip) if rng.one_in(2) => lines.push(ip_line(rng, ip)),
            Says::Maybe(_) => {}
            Says::Error => lines.push("error: bad packet".into()),
            Says::Event(ref e) if events || rng.one_in(4) => lines.push(e.clone()),
            Says::Event(_) => {}
        }
        if rng.one_in(40) {
            lines.push(
                [
                    "",
                    "bad packet at 0x1234",
                    " \t401000",
                    "[end of trace]",
                    "face",
                    // 17 digits, and a word that does not end at whitespace: not instructions.
                    "0x00000000000401000",
                    "0x401000\x0b",
                    "0x40100g",
                ][rng.below(8) as usize]
                    .into(),
            );
        }
    }
    let ips: Vec<usize> = (0..lines.len())
        .filter(|&k| lines[k].contains(|c: char| c.is_ascii_hexdigit()) && !lines[k].starts_with('['))
        .collect();
    match rng.below(4) {
        1 => lines.truncate(rng.below(lines.len() as u64 + 1) as usize),
        2 if !ips.is_empty() => {
            let k = ips[rng.below(ips.len() as u64) as usize];
            lines[k] = format!("0x{:x}", 0x40_0000 + rng.below(0x800));
        }
        3 if !lines.is_empty() => {
            lines.remove(rng.below(lines.len() as u64) as usize);
        }
        _ => {}
    }
    let mut text = lines.join("\n");
    if rng.one_in(4) {
        text.push('\n');
    }
    text.into_bytes()
}

/// Cases a run: 512, or `PROPTEST_CASES`.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// TR8, TR15: the block walk gives the verdict of the walk one step a line, on random
    /// truths of blocks and outputs exact, cut short, with an IP changed or a line left out, with
    /// and without events (TR10, TR11) and times (TR13), read through buffers of 1 byte to 64 KiB.
    #[test]
    fn tr8_tr15_the_block_walk_gives_the_per_instruction_verdict(seed in 1u64.., mode in 0u8..4, cap in prop_oneof![1usize..40, Just(1 << 16)]) {
        let mut rng = Rng(seed);
        let (bytes, says) = random_truth(&mut rng);
        let p = Pattern::read("t.bin", &bytes[..]).expect("a well-formed truth");
        let options = match mode {
            0 => Options::default(),
            1 => Options::events(true),
            2 => Options::perf_events(),
            _ => Options::default().with_time(3),
        };
        let out = output(&mut rng, &says, mode == 1);
        let walked = check_with(&p, BufReader::with_capacity(cap, &out[..]), options);
        let stepped = check_per_instruction(&p, BufReader::with_capacity(cap, &out[..]), options);
        match (walked, stepped) {
            (Ok(w), Ok(s)) => prop_assert_eq!(w, s, "{}", String::from_utf8_lossy(&out)),
            (Err(w), Err(s)) => prop_assert_eq!(w.to_string(), s.to_string()),
            (w, s) => prop_assert!(false, "{:?} against {:?}", w, s),
        }
    }
}

/// What `ptemu verify` gives for the truth file at `path` and the output `out`: the truth's
/// error, or the instructions a decoder can give and the match's verdict (or its error); with
/// `beside`, the records checked on one thread while the output is matched on another
/// ([`Unchecked`]), else checked whole first ([`Pattern::open`]) and matched after.
type Outcome = Result<(u64, Result<Verdict, String>), String>;

fn verify_file(path: &std::path::Path, out: Vec<u8>, options: Options, beside: bool) -> Outcome {
    if beside {
        if let Some(u) = Unchecked::open(path).map_err(|e| e.to_string())? {
            let matching = u.spawn_match(std::io::Cursor::new(out), options);
            let n = u.check().map_err(|e| e.to_string());
            // Waited for here even when the check fails (the command does not wait): the match
            // must not panic on a truth the check refuses, or its message would reach stderr.
            let (v, _) = matching.join().expect("the match does not panic");
            return Ok((n?, v.map_err(|e| e.to_string())));
        }
    }
    let p = Pattern::open(path).map_err(|e| e.to_string())?;
    let v = check_with(&p, &out[..], options).map_err(|e| e.to_string());
    Ok((p.instructions, v))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases() / 2, ..ProptestConfig::default() })]

    /// TR1, TR8, issue 51 §5: a truth.bin's records checked on one core while the output is
    /// matched on the other give what the check then the match give: the same truth error
    /// (its byte and words) on a file cut short or with a byte changed, else the same count and
    /// verdict, or the same error of the match.
    #[test]
    fn tr1_tr8_the_check_beside_the_match_gives_the_check_then_the_match(seed in 1u64.., damage in 0u8..4, events in any::<bool>()) {
        let mut rng = Rng(seed);
        let (mut bytes, says) = random_truth(&mut rng);
        match damage {
            1 => bytes.truncate(rng.below(bytes.len() as u64) as usize),
            2 => {
                let k = rng.below(bytes.len() as u64) as usize;
                bytes[k] = rng.next() as u8;
            }
            3 => {
                // Past the header: a record, the end's counts or the table.
                let k = bytes.len() - 1 - rng.below((bytes.len() / 2) as u64) as usize;
                bytes[k] ^= 1 << rng.below(8);
            }
            _ => {}
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("truth.bin");
        std::fs::write(&path, &bytes).unwrap();
        let out = output(&mut rng, &says, events);
        let options = Options::events(events);
        let beside = verify_file(&path, out.clone(), options, true);
        let after = verify_file(&path, out, options, false);
        prop_assert_eq!(beside, after);
    }
}

/// TR8, TR15: the outputs above do reach deep into the truths and pass where they are exact: a
/// check that the property compares walks that matched something (not two early divergences).
#[test]
fn tr8_tr15_exact_outputs_of_random_block_truths_pass() {
    let (mut passed, mut lines) = (0, 0);
    for seed in 1..400u64 {
        let mut rng = Rng(seed * 0x9e37_79b9);
        let (bytes, says) = random_truth(&mut rng);
        let p = Pattern::read("t.bin", &bytes[..]).unwrap();
        // Required and optional IPs only, as 0x words: exact when the truth has no span.
        if says.iter().any(|s| matches!(s, Says::Error | Says::Maybe(_))) {
            continue;
        }
        let out: String = says
            .iter()
            .filter_map(|s| match s {
                Says::Ip(ip) => Some(format!("0x{ip:x}\n")),
                _ => None,
            })
            .collect();
        let v = check_with(&p, out.as_bytes(), Options::default()).unwrap();
        assert_eq!(v.divergence, None, "seed {seed}");
        assert_eq!(
            v,
            check_per_instruction(&p, out.as_bytes(), Options::default()).unwrap()
        );
        passed += 1;
        lines += v.ips;
    }
    assert!(passed > 50 && lines > 1000, "{passed} truths, {lines} lines");
}
