//! Fuzz target: `ptemu dump --format ptdump` on arbitrary bytes, with an arbitrary perf_event
//! sideband file. The first byte picks the options (each bit one of ptdump's), the next two the
//! sideband file's length and sample type; the rest is the sideband file then the trace. Reading
//! either must never panic or hang: a bad sideband file is an error naming its byte, a bad trace
//! is printed as ptdump prints it.
#![no_main]
use ptemu::ptdump::sideband::{Pevent, PeventConfig, PrintFlags, Session};
use ptemu::ptdump::{dump_with_sideband, Options};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let [flags, sb_len, kind, rest @ ..] = data else {
        return;
    };
    let sb_len = usize::from(*sb_len).min(rest.len());
    let (sb, trace) = rest.split_at(sb_len);
    let bit = |k: u8| flags & (1 << k) != 0;
    let o = Options {
        lastip: bit(0),
        time: bit(1),
        tcal: bit(2) && !bit(1),
        time_delta: bit(3),
        no_tcal: bit(4),
        no_wall_clock: bit(5),
        no_sync: bit(6),
        exec_mode: bit(7),
        ..Options::default()
    };
    // No samples, or TID, TIME, CPU and IDENTIFIER as ptemu's perf.data has them.
    let config = PeventConfig {
        sample_type: if kind & 1 == 0 {
            0
        } else {
            0x1_0000 | 0x2 | 0x4 | 0x80
        },
        ..PeventConfig::default()
    };
    let mut session = match Pevent::read("fuzz.sb", sb, &config) {
        Ok(p) => Session::new(
            vec![p],
            PrintFlags {
                compact: kind & 2 == 0,
                verbose: kind & 2 != 0,
                offset: kind & 4 != 0,
                time: kind & 8 != 0,
                filename: kind & 16 != 0,
            },
        ),
        Err(_) => Session::default(),
    };
    let _ = dump_with_sideband(trace, &o, &mut session, &mut std::io::sink());
});
