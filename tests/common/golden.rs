//! libipt's golden packets (tests/data/libipt-golden-packets.txt, see tests/data/SOURCE.md):
//! `FILE.pt: HEXBYTES  DECODE` per packet, in stream order per file, or `FILE.pt: [OFFSET:
//! error decoding ...]` where ptdump stopped at a byte it could not decode.

/// The golden packets file (libipt-golden-packets.txt).
const GOLDEN: &str = include_str!("../data/libipt-golden-packets.txt");

/// One line of the file.
pub struct GoldenLine {
    /// The test it comes from (the `.pt` name without `.pt`).
    pub test: &'static str,
    /// The packet's bytes (empty for an error line).
    pub bytes: Vec<u8>,
    /// ptdump's decode of it (the error text for an error line).
    pub decode: &'static str,
    /// ptdump could not decode the bytes here.
    pub error: bool,
}

/// Every line of the file, comments and blank lines left out.
pub fn lines() -> Vec<GoldenLine> {
    GOLDEN
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (test, rest) = l.split_once(".pt: ").unwrap();
            let rest = rest.trim_start();
            if rest.starts_with('[') {
                return GoldenLine {
                    test,
                    bytes: Vec::new(),
                    decode: rest,
                    error: true,
                };
            }
            let (hex, decode) = rest.split_once(char::is_whitespace).unwrap();
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            GoldenLine {
                test,
                bytes,
                decode: decode.trim(),
                error: false,
            }
        })
        .collect()
}

/// The documented disagreement (spec/packets.md): libipt puts PWRE's HW bit at byte 2 bit 3;
/// the SDM and perf at bit 7, which ptemu follows.
pub fn is_libipt_pwre_hw(bytes: &[u8]) -> bool {
    bytes.len() == 4 && bytes[..2] == [0x02, 0x22] && bytes[2] == 0x08
}
