//! Fuzz target: any text as a tracer config (`--tracer-config`). Parsing never panics; a config
//! that parses and validates runs a short simulation of the bundled Penn sample with TSC, MTC and CYC on without a panic,
//! an allocation failure or a hang.
#![no_main]
use ptemu::simulate::{self, default_layout, Options};
use ptemu::sources::{Format, Input};

const SAMPLE: &[u8] = include_bytes!("../../tests/data/penn/sjeng-1K.trace");

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(cfg) = toml::from_str::<ptemu::TracerConfig>(&text) else {
        return;
    };
    if cfg.validate().is_err() {
        return;
    }
    let mut opts = Options::new(Format::Penn, default_layout());
    opts.tracer = cfg;
    // Timing packets on, so the clock settings shape the stream (TSC, TMA, MTC, CYC).
    opts.ctl = opts.ctl.with_tsc_en(true).with_mtc_en(true).with_cyc_en(true);
    opts.image = false;
    let input = Input::from_bytes("sample", SAMPLE[..SAMPLE.len() / 4].to_vec()).unwrap();
    let _ = simulate::run(
        &opts,
        input,
        None,
        std::io::sink(),
        Default::default(),
        &mut |_| {},
    );
});
