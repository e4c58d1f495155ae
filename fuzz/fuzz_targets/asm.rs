//! Fuzz target: any text through the `asm` parser, line by line. It never panics; every packet
//! it accepts encodes, decodes back to itself, and prints as text that parses back to it.
#![no_main]
use ptemu::packet::text::{parse_line, to_text, ParseState};
use ptemu::packet::PacketDecoder;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut st = ParseState::default();
    for line in text.lines() {
        let Ok(Some(p)) = parse_line(line, &mut st) else {
            continue;
        };
        let mut bytes = Vec::new();
        p.encode_to_vec(&mut bytes)
            .expect("parse_line checked the fields");
        let mut d = PacketDecoder::new(&bytes, 0);
        if !matches!(p, ptemu::packet::Packet::Bip { .. }) {
            // A BIP decodes only inside its block; the others stand alone.
            let (_, back) = d.next_packet().expect("one packet").expect("it decodes");
            assert_eq!(back, p, "{line}");
        }
        let shown = to_text(&p);
        let mut st2 = st;
        let again = parse_line(&shown, &mut st2)
            .expect("dump's text parses")
            .expect("a packet");
        assert_eq!(again, p, "{line} -> {shown}");
    }
});
