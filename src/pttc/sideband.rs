//! `@sb` directives: sideband files, raw values, and perf_event records (`pevent-*`) laid out as
//! libipt's `pev_write` lays them out: a `perf_event_header` (type, misc, size), the record's
//! fields, a file name or command padded with NULs to 8 bytes, then the samples the file's
//! `sample_type` asks for (pid/tid, time, id, stream id, cpu plus 4 reserved bytes, identifier).
//!
//! A sideband file is named `<root>[-<src>]-<format>-<primary|secondary>.sb`; once it holds a
//! pevent record its name also carries its perf configuration, as pttc renames it:
//! `…,sample-type=0x<hex>,time-zero=0x<hex>,time-shift=0x<n>,time-mult=0x<n>.sb` (shift and mult
//! in decimal after the `0x`, as pttc prints them). ptemu's configuration is pttc's fixed one:
//! time-zero 0, time-shift 0, time-mult 1, so a sample's time is the TSC given.

use super::ctext::{to_uint, Strtok};
use super::listing::Labels;

const PERF_RECORD_MMAP: u32 = 1;
const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_COMM: u32 = 3;
const PERF_RECORD_EXIT: u32 = 4;
const PERF_RECORD_FORK: u32 = 7;
const PERF_RECORD_AUX: u32 = 11;
const PERF_RECORD_ITRACE_START: u32 = 12;
const PERF_RECORD_LOST_SAMPLES: u32 = 13;
const PERF_RECORD_SWITCH: u32 = 14;
const PERF_RECORD_SWITCH_CPU_WIDE: u32 = 15;
/// `PERF_RECORD_MISC_COMM_EXEC` and `PERF_RECORD_MISC_SWITCH_OUT` share this bit.
const MISC_BIT_13: u16 = 1 << 13;

const SAMPLE_TID: u64 = 1 << 1;
const SAMPLE_TIME: u64 = 1 << 2;
const SAMPLE_ID: u64 = 1 << 6;
const SAMPLE_CPU: u64 = 1 << 7;
const SAMPLE_STREAM_ID: u64 = 1 << 9;
const SAMPLE_IDENTIFIER: u64 = 1 << 16;
const SAMPLES_KNOWN: u64 =
    SAMPLE_TID | SAMPLE_TIME | SAMPLE_ID | SAMPLE_CPU | SAMPLE_STREAM_ID | SAMPLE_IDENTIFIER;

#[derive(Clone, Debug)]
enum Format {
    Raw,
    Pevent { sample_type: u64, is_final: bool },
}

#[derive(Clone, Debug)]
struct SbFile {
    name: String,
    format: Format,
    bytes: Vec<u8>,
}

/// The sideband files of one run.
#[derive(Clone, Debug, Default)]
pub struct Sideband {
    files: Vec<SbFile>,
    current: Option<usize>,
}

fn num(token: Option<&str>, bits: u32, what: &str) -> Result<u64, String> {
    let t = token.ok_or_else(|| format!("{what} missing"))?;
    to_uint(t, bits).map_err(|e| format!("bad {what} '{t}': {e}"))
}

fn padded_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.push(0);
    while !out.len().is_multiple_of(8) {
        out.push(0);
    }
}

/// What a file's name and a section's labels need.
#[derive(Debug)]
pub struct Context<'a> {
    /// The output file root (the .ptt name without directory and extension).
    pub root: &'a str,
    /// pttc's yasm labels (sections and `org`).
    pub labels: &'a Labels,
}

impl Sideband {
    /// Bytes written so far to the current file (the value of an `@sb` label).
    pub fn offset(&self) -> Result<u64, String> {
        let i = self
            .current
            .ok_or("no sideband file (use @sb primary(...) or secondary(...) first)")?;
        Ok(self.files[i].bytes.len() as u64)
    }

    fn current(&mut self) -> Result<&mut SbFile, String> {
        let i = self
            .current
            .ok_or("no sideband file (use @sb primary(...) or secondary(...) first)")?;
        Ok(&mut self.files[i])
    }

    fn open(&mut self, ctx: &Context, payload: &str, prio: &str) -> Result<(), String> {
        let mut t = Strtok::new(payload);
        let format = t.next(" ,").ok_or_else(|| format!("{prio}: format missing"))?;
        let name = match t.next(" ") {
            Some(src) => format!("{}-{src}-{format}-{prio}.sb", ctx.root),
            None => format!("{}-{format}-{prio}.sb", ctx.root),
        };
        let i = match self.files.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                self.files.push(SbFile {
                    name,
                    format: Format::Raw,
                    bytes: Vec::new(),
                });
                self.files.len() - 1
            }
        };
        self.current = Some(i);
        Ok(())
    }

    fn raw(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.current()?.bytes.extend_from_slice(bytes);
        Ok(())
    }

    /// The current file as a pevent file: its sample type and whether it is final.
    fn pevent(&mut self) -> Result<(&mut u64, &mut bool, &mut Vec<u8>), String> {
        let f = self.current()?;
        if let Format::Raw = f.format {
            f.format = Format::Pevent {
                sample_type: 0,
                is_final: false,
            };
        }
        match &mut f.format {
            Format::Pevent {
                sample_type,
                is_final,
            } => Ok((sample_type, is_final, &mut f.bytes)),
            Format::Raw => Err("internal: not a pevent file".into()),
        }
    }

    /// Writes a record: header, `body`, then the samples read from `t`.
    fn record(&mut self, ty: u32, misc: u16, body: &[u8], t: &mut Strtok) -> Result<(), String> {
        let (sample_type, is_final, bytes) = self.pevent()?;
        let st = *sample_type;
        let mut samples = Vec::new();
        if st & SAMPLE_TID != 0 {
            let pid = num(t.next(" ,"), 32, "pid")? as u32;
            let tid = num(t.next(" ,"), 32, "tid")? as u32;
            samples.push((SAMPLE_TID, [pid.to_le_bytes(), tid.to_le_bytes()].concat()));
        }
        if st & SAMPLE_TIME != 0 {
            // time = time-zero + tsc scaled by time-mult >> time-shift: the TSC itself here.
            let tsc = num(t.next(" ,"), 64, "tsc")?;
            samples.push((SAMPLE_TIME, tsc.to_le_bytes().to_vec()));
        }
        if st & SAMPLE_ID != 0 {
            samples.push((SAMPLE_ID, num(t.next(" ,"), 64, "id")?.to_le_bytes().to_vec()));
        }
        if st & SAMPLE_CPU != 0 {
            let cpu = num(t.next(" ,"), 32, "cpu")? as u32;
            samples.push((SAMPLE_CPU, [cpu.to_le_bytes(), [0; 4]].concat()));
        }
        if st & SAMPLE_STREAM_ID != 0 {
            samples.push((
                SAMPLE_STREAM_ID,
                num(t.next(" ,"), 64, "stream")?.to_le_bytes().to_vec(),
            ));
        }
        if st & SAMPLE_IDENTIFIER != 0 {
            samples.push((
                SAMPLE_IDENTIFIER,
                num(t.next(" ,"), 64, "identifier")?.to_le_bytes().to_vec(),
            ));
        }
        if let Some(extra) = t.next(" ,") {
            return Err(format!("unexpected sample '{extra}'"));
        }
        if st & !SAMPLES_KNOWN != 0 {
            return Err(format!("sample type {st:#x} has bits libipt cannot write"));
        }
        // Written in perf's order: stream id before cpu.
        let order = [
            SAMPLE_TID,
            SAMPLE_TIME,
            SAMPLE_ID,
            SAMPLE_STREAM_ID,
            SAMPLE_CPU,
            SAMPLE_IDENTIFIER,
        ];
        let mut tail = Vec::new();
        for bit in order {
            if let Some((_, b)) = samples.iter().find(|(k, _)| *k == bit) {
                tail.extend_from_slice(b);
            }
        }
        let size = 8 + body.len() + tail.len();
        let size = u16::try_from(size).map_err(|_| format!("record of {size} bytes is too big"))?;
        bytes.extend_from_slice(&ty.to_le_bytes());
        bytes.extend_from_slice(&misc.to_le_bytes());
        bytes.extend_from_slice(&size.to_le_bytes());
        bytes.extend_from_slice(body);
        bytes.extend_from_slice(&tail);
        *is_final = true;
        Ok(())
    }

    /// Runs one `@sb` directive.
    pub fn process(&mut self, ctx: &Context, name: &str, payload: &str) -> Result<(), String> {
        let mut t = Strtok::new(payload);
        let first = |what: &str| num(Strtok::new(payload).next(" ,"), 64, what);
        match name {
            "primary" => self.open(ctx, payload, "primary"),
            "secondary" => self.open(ctx, payload, "secondary"),
            "raw-8" => {
                self.raw(&[first("value").and_then(|v| u8::try_from(v).map_err(|_| "value too big".into()))?])
            }
            "raw-16" => {
                let v = first("value")?;
                let v = u16::try_from(v).map_err(|_| "value too big".to_string())?;
                self.raw(&v.to_le_bytes())
            }
            "raw-32" => {
                let v = first("value")?;
                let v = u32::try_from(v).map_err(|_| "value too big".to_string())?;
                self.raw(&v.to_le_bytes())
            }
            "raw-64" => self.raw(&first("value")?.to_le_bytes()),
            "pevent-sample_type" => {
                let mut st = 0u64;
                let mut index = 0;
                while let Some(tok) = t.next(" ,") {
                    st |= match tok {
                        "tid" => SAMPLE_TID,
                        "time" => SAMPLE_TIME,
                        "id" => SAMPLE_ID,
                        "stream" => SAMPLE_STREAM_ID,
                        "cpu" => SAMPLE_CPU,
                        "identifier" => SAMPLE_IDENTIFIER,
                        // pttc reads a number from the first argument only.
                        _ if index == 0 => num(Some(tok), 64, "sample type")?,
                        _ => {
                            return Err(format!(
                                "sample type '{tok}': a number must be the first argument"
                            ))
                        }
                    };
                    index += 1;
                }
                let (sample_type, is_final, _) = self.pevent()?;
                if *is_final {
                    return Err("the sideband configuration can no longer be modified".into());
                }
                *sample_type = st;
                Ok(())
            }
            "pevent-mmap-section" => {
                let section = t.next(" ,").ok_or("section missing")?;
                let pid = num(t.next(" ,"), 32, "pid")? as u32;
                let tid = num(t.next(" ,"), 32, "tid")? as u32;
                let label = |attr: &str| {
                    ctx.labels
                        .get(&format!("section_{section}_{attr}"))
                        .ok_or_else(|| format!("section {section}: no {attr}"))
                };
                let (vstart, len, start) = (label("vstart")?, label("length")?, label("start")?);
                let org = ctx.labels.get("org").ok_or("no org")?;
                let pgoff = start
                    .checked_sub(org)
                    .ok_or("corrupt section labels: start below org")?;
                let body = mmap_body(pid, tid, vstart, len, pgoff, &format!("{}.bin", ctx.root));
                self.record(PERF_RECORD_MMAP, 0, &body, &mut t)
            }
            "pevent-mmap" => {
                let pid = num(t.next(" ,"), 32, "pid")? as u32;
                let tid = num(t.next(" ,"), 32, "tid")? as u32;
                let addr = num(t.next(" ,"), 64, "addr")?;
                let len = num(t.next(" ,"), 64, "len")?;
                let pgoff = num(t.next(" ,"), 64, "pgoff")?;
                let file = t.next(" ,").ok_or("filename missing")?;
                let body = mmap_body(pid, tid, addr, len, pgoff, file);
                self.record(PERF_RECORD_MMAP, 0, &body, &mut t)
            }
            "pevent-lost" => {
                let id = num(t.next(" ,"), 64, "id")?;
                let lost = num(t.next(" ,"), 64, "lost")?;
                let body = [id.to_le_bytes(), lost.to_le_bytes()].concat();
                self.record(PERF_RECORD_LOST, 0, &body, &mut t)
            }
            "pevent-comm" | "pevent-comm.exec" => {
                let pid = num(t.next(" ,"), 32, "pid")? as u32;
                let tid = num(t.next(" ,"), 32, "tid")? as u32;
                let comm = t.next(" ,").ok_or("comm missing")?;
                let mut body = [pid.to_le_bytes(), tid.to_le_bytes()].concat();
                padded_string(&mut body, comm);
                let misc = if name == "pevent-comm.exec" {
                    MISC_BIT_13
                } else {
                    0
                };
                self.record(PERF_RECORD_COMM, misc, &body, &mut t)
            }
            "pevent-exit" | "pevent-fork" => {
                let mut body = Vec::new();
                for what in ["pid", "ppid", "tid", "ptid"] {
                    body.extend_from_slice(&(num(t.next(" ,"), 32, what)? as u32).to_le_bytes());
                }
                body.extend_from_slice(&num(t.next(" ,"), 64, "time")?.to_le_bytes());
                let ty = if name == "pevent-exit" {
                    PERF_RECORD_EXIT
                } else {
                    PERF_RECORD_FORK
                };
                self.record(ty, 0, &body, &mut t)
            }
            "pevent-aux" => {
                let mut body = Vec::new();
                for what in ["offset", "size", "flags"] {
                    body.extend_from_slice(&num(t.next(" ,"), 64, what)?.to_le_bytes());
                }
                self.record(PERF_RECORD_AUX, 0, &body, &mut t)
            }
            "pevent-itrace-start" => {
                let pid = num(t.next(" ,"), 32, "pid")? as u32;
                let tid = num(t.next(" ,"), 32, "tid")? as u32;
                let body = [pid.to_le_bytes(), tid.to_le_bytes()].concat();
                self.record(PERF_RECORD_ITRACE_START, 0, &body, &mut t)
            }
            "pevent-lost-samples" => {
                let lost = num(t.next(" ,"), 64, "lost")?;
                self.record(PERF_RECORD_LOST_SAMPLES, 0, &lost.to_le_bytes(), &mut t)
            }
            "pevent-switch.in" => self.record(PERF_RECORD_SWITCH, 0, &[], &mut t),
            "pevent-switch.out" => self.record(PERF_RECORD_SWITCH, MISC_BIT_13, &[], &mut t),
            "pevent-switch-cpu-wide.in" | "pevent-switch-cpu-wide.out" => {
                let pid = num(t.next(" ,"), 32, "pid")? as u32;
                let tid = num(t.next(" ,"), 32, "tid")? as u32;
                let body = [pid.to_le_bytes(), tid.to_le_bytes()].concat();
                let misc = if name.ends_with(".out") { MISC_BIT_13 } else { 0 };
                self.record(PERF_RECORD_SWITCH_CPU_WIDE, misc, &body, &mut t)
            }
            _ => Err(format!("unknown sideband directive '{name}'")),
        }
    }

    /// The files, under their final names.
    pub fn into_files(self) -> Vec<(String, Vec<u8>)> {
        self.files
            .into_iter()
            .map(|f| {
                let name = match f.format {
                    Format::Raw => f.name,
                    Format::Pevent { sample_type, .. } => {
                        let base = f.name.strip_suffix(".sb").unwrap_or(&f.name);
                        format!("{base},sample-type={sample_type:#x},time-zero=0x0,time-shift=0x0,time-mult=0x1.sb")
                    }
                };
                (name, f.bytes)
            })
            .collect()
    }
}

fn mmap_body(pid: u32, tid: u32, addr: u64, len: u64, pgoff: u64, file: &str) -> Vec<u8> {
    let mut body = [pid.to_le_bytes(), tid.to_le_bytes()].concat();
    for v in [addr, len, pgoff] {
        body.extend_from_slice(&v.to_le_bytes());
    }
    padded_string(&mut body, file);
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pevent_records() {
        let mut labels = Labels::default();
        labels.add("org", 0x1000).unwrap();
        labels.add("section_text_length", 6).unwrap();
        labels.add("section_text_start", 0x1000).unwrap();
        labels.add("section_text_vstart", 0x1000).unwrap();
        let ctx = Context {
            root: "t",
            labels: &labels,
        };
        let mut sb = Sideband::default();
        assert!(sb.offset().is_err());
        sb.process(&ctx, "primary", "pevent").unwrap();
        sb.process(&ctx, "pevent-sample_type", "time").unwrap();
        sb.process(&ctx, "pevent-mmap-section", "text, 1, 1, 0x5")
            .unwrap();
        // header 8 + 32 + "t.bin\0" padded to 8 + time 8
        assert_eq!(sb.offset().unwrap(), 8 + 32 + 8 + 8);
        sb.process(&ctx, "pevent-switch.out", "0x6").unwrap();
        assert!(sb.process(&ctx, "pevent-sample_type", "tid").is_err());
        assert!(sb.process(&ctx, "pevent-itrace-start", "1, 1").is_err());
        assert!(sb.process(&ctx, "pevent-itrace-start", "1, 1, 2, 3").is_err());
        let files = sb.into_files();
        assert_eq!(
            files[0].0,
            "t-pevent-primary,sample-type=0x4,time-zero=0x0,time-shift=0x0,time-mult=0x1.sb"
        );
        let b = &files[0].1;
        assert_eq!(&b[..8], &[1, 0, 0, 0, 0, 0, 56, 0]);
        assert_eq!(&b[40..46], b"t.bin\0");
        assert_eq!(&b[56..64], &[14, 0, 0, 0, 0, 0x20, 16, 0]);
        assert_eq!(&b[64..72], &6u64.to_le_bytes());
    }
}
