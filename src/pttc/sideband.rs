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

use super::ctext::{self, num, Strtok};
use super::listing::Labels;
use crate::perf_data::abi::*;

const SAMPLES_KNOWN: u64 = PERF_SAMPLE_TID
    | PERF_SAMPLE_TIME
    | PERF_SAMPLE_ID
    | PERF_SAMPLE_CPU
    | PERF_SAMPLE_STREAM_ID
    | PERF_SAMPLE_IDENTIFIER;

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
        Ok(self.files[self.current_index()?].bytes.len() as u64)
    }

    fn current(&mut self) -> Result<&mut SbFile, String> {
        let i = self.current_index()?;
        Ok(&mut self.files[i])
    }

    fn current_index(&self) -> Result<usize, String> {
        self.current
            .ok_or_else(|| "no sideband file (use @sb primary(...) or secondary(...) first)".into())
    }

    fn open(&mut self, ctx: &Context, payload: &str, prio: &str) -> Result<(), String> {
        let mut t = Strtok::new(payload);
        let format = t.next(" ,").ok_or_else(|| format!("{prio}: format missing"))?;
        let name = match t.next(" ") {
            Some(src) => format!("{}-{src}-{format}-{prio}.sb", ctx.root),
            None => format!("{}-{format}-{prio}.sb", ctx.root),
        };
        if name.contains(['/', '\0']) {
            return Err(format!("sideband file name '{name}' is not a plain file name"));
        }
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
        // Read in pttc's order (tid, time, id, cpu, stream, identifier), written in perf's:
        // the stream id before the cpu.
        let mut tail = Vec::new();
        let mut cpu = None;
        if st & PERF_SAMPLE_TID != 0 {
            tail.extend(pid_tid(t)?);
        }
        if st & PERF_SAMPLE_TIME != 0 {
            // time = time-zero + tsc scaled by time-mult >> time-shift: the TSC itself here.
            tail.extend(num(t.next(" ,"), 64, "tsc")?.to_le_bytes());
        }
        if st & PERF_SAMPLE_ID != 0 {
            tail.extend(num(t.next(" ,"), 64, "id")?.to_le_bytes());
        }
        if st & PERF_SAMPLE_CPU != 0 {
            cpu = Some(num(t.next(" ,"), 32, "cpu")? as u32);
        }
        if st & PERF_SAMPLE_STREAM_ID != 0 {
            tail.extend(num(t.next(" ,"), 64, "stream")?.to_le_bytes());
        }
        if let Some(cpu) = cpu {
            tail.extend(cpu.to_le_bytes());
            tail.extend([0; 4]);
        }
        if st & PERF_SAMPLE_IDENTIFIER != 0 {
            tail.extend(num(t.next(" ,"), 64, "identifier")?.to_le_bytes());
        }
        if let Some(extra) = t.next(" ,") {
            return Err(format!("unexpected sample '{extra}'"));
        }
        if st & !SAMPLES_KNOWN != 0 {
            return Err(format!("sample type {st:#x} has bits libipt cannot write"));
        }
        header(bytes, ty, misc, 8 + body.len() + tail.len()).map_err(|e| e.to_string())?;
        bytes.extend_from_slice(body);
        bytes.extend_from_slice(&tail);
        *is_final = true;
        Ok(())
    }

    /// Runs one `@sb` directive.
    pub fn process(&mut self, ctx: &Context, name: &str, payload: &str) -> Result<(), String> {
        let mut t = Strtok::new(payload);
        match name {
            "primary" => self.open(ctx, payload, "primary"),
            "secondary" => self.open(ctx, payload, "secondary"),
            "pevent-sample_type" => {
                let mut st = 0u64;
                let mut index = 0;
                while let Some(tok) = t.next(" ,") {
                    st |= match tok {
                        "tid" => PERF_SAMPLE_TID,
                        "time" => PERF_SAMPLE_TIME,
                        "id" => PERF_SAMPLE_ID,
                        "stream" => PERF_SAMPLE_STREAM_ID,
                        "cpu" => PERF_SAMPLE_CPU,
                        "identifier" => PERF_SAMPLE_IDENTIFIER,
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
                let ids = pid_tid(&mut t)?;
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
                let body = mmap_body(&ids, vstart, len, pgoff, &format!("{}.bin", ctx.root));
                self.record(PERF_RECORD_MMAP, 0, &body, &mut t)
            }
            "pevent-mmap" => {
                let ids = pid_tid(&mut t)?;
                let addr = num(t.next(" ,"), 64, "addr")?;
                let len = num(t.next(" ,"), 64, "len")?;
                let pgoff = num(t.next(" ,"), 64, "pgoff")?;
                let file = t.next(" ,").ok_or("filename missing")?;
                let body = mmap_body(&ids, addr, len, pgoff, file);
                self.record(PERF_RECORD_MMAP, 0, &body, &mut t)
            }
            "pevent-lost" => {
                let id = num(t.next(" ,"), 64, "id")?;
                let lost = num(t.next(" ,"), 64, "lost")?;
                let body = [id.to_le_bytes(), lost.to_le_bytes()].concat();
                self.record(PERF_RECORD_LOST, 0, &body, &mut t)
            }
            "pevent-comm" | "pevent-comm.exec" => {
                let mut body = pid_tid(&mut t)?;
                let comm = t.next(" ,").ok_or("comm missing")?;
                body.extend(padded_str(comm));
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
                let body = pid_tid(&mut t)?;
                self.record(PERF_RECORD_ITRACE_START, 0, &body, &mut t)
            }
            "pevent-lost-samples" => {
                let lost = num(t.next(" ,"), 64, "lost")?;
                self.record(PERF_RECORD_LOST_SAMPLES, 0, &lost.to_le_bytes(), &mut t)
            }
            "pevent-switch.in" => self.record(PERF_RECORD_SWITCH, 0, &[], &mut t),
            "pevent-switch.out" => self.record(PERF_RECORD_SWITCH, MISC_BIT_13, &[], &mut t),
            "pevent-switch-cpu-wide.in" | "pevent-switch-cpu-wide.out" => {
                let body = pid_tid(&mut t)?;
                let misc = if name.ends_with(".out") { MISC_BIT_13 } else { 0 };
                self.record(PERF_RECORD_SWITCH_CPU_WIDE, misc, &body, &mut t)
            }
            _ => match ctext::raw_le(name, payload) {
                Some(raw) => self.raw(&raw?),
                None => Err(format!("unknown sideband directive '{name}'")),
            },
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

/// A pid and a tid read from `t`, as the 8 bytes a record holds them in.
fn pid_tid(t: &mut Strtok) -> Result<Vec<u8>, String> {
    let pid = num(t.next(" ,"), 32, "pid")? as u32;
    let tid = num(t.next(" ,"), 32, "tid")? as u32;
    Ok([pid.to_le_bytes(), tid.to_le_bytes()].concat())
}

fn mmap_body(ids: &[u8], addr: u64, len: u64, pgoff: u64, file: &str) -> Vec<u8> {
    let mut body = ids.to_vec();
    for v in [addr, len, pgoff] {
        body.extend_from_slice(&v.to_le_bytes());
    }
    body.extend(padded_str(file));
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
