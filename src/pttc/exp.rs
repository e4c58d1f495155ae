//! `.exp` sections: the expected decoder output, one file per `@pt .exp(tool)`, from the comment
//! text of the lines that follow it, with `%label` references replaced as pttc replaces them:
//!
//! - `%name` is a yasm label's address in lower-case hex without `0x`; `%0name` pads it to 16
//!   digits; `.n` after the name keeps its low `n` bytes (0 to 8); `%?name.n` prints the masked-off
//!   bytes as `??` and the kept ones as two hex digits each (16 characters in all);
//! - a name that is not a yasm label is looked up among the `@pt`/`@sb` directive labels (byte
//!   offsets in the .pt or .sb file, and `eos`, the .pt file's length): printed in hex, padded to
//!   16 digits with `0` after `%0` and `%?` alike, and a `.n` after it is left as text;
//! - a line's text starts after its first `;`, ends before its first `#`, and loses its trailing
//!   white space; a line without `;` is left out.

use super::ctext::{is_c_space, strtoull};
use super::listing::{Labels, LABEL_MAX};

fn is_label_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// One line of an .exp file (without its newline), or `None` for a line that has no `;`.
pub fn render_line(line: &str, yasm: &Labels, directives: &Labels) -> Result<Option<String>, String> {
    let Some(semi) = line.find(';') else {
        return Ok(None);
    };
    let mut text = &line[semi + 1..];
    if let Some(hash) = text.find('#') {
        text = &text[..hash];
    }
    let text = text.trim_end_matches(|c: char| c.is_ascii() && is_c_space(c as u8));
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(pct) = rest.find('%') {
        out.push_str(&rest[..pct]);
        let mut s = &rest[pct + 1..];
        match s.bytes().next() {
            None => return Err("'%' without a label name".into()),
            Some(c) if is_c_space(c) => return Err("'%' without a label name".into()),
            _ => {}
        }
        let (mut zero, mut qmark) = (false, false);
        if let Some(r) = s.strip_prefix('0') {
            zero = true;
            s = r;
        } else if let Some(r) = s.strip_prefix('?') {
            qmark = true;
            zero = true;
            s = r;
        }
        let n = s.bytes().take_while(|&c| is_label_char(c)).count();
        if n >= LABEL_MAX {
            return Err(format!("label name '{}' is too long", &s[..n]));
        }
        let name = &s[..n];
        s = &s[n..];
        let Some(mut addr) = yasm.get(name) else {
            let value = directives
                .get(name)
                .ok_or_else(|| format!("undefined label '{name}'"))?;
            if zero {
                out.push_str(&format!("{value:016x}"));
            } else {
                out.push_str(&format!("{value:x}"));
            }
            rest = s;
            continue;
        };
        let mut unknown = 0usize;
        if let Some(r) = s.strip_prefix('.') {
            let (bytes, used, _) =
                strtoull(r, 0).ok_or_else(|| format!("%{name}: bad byte count after '.'"))?;
            let after = r.as_bytes().get(used).copied();
            if after.is_some() && !after.is_some_and(|c| is_c_space(c) || c.is_ascii_punctuation()) {
                return Err(format!("%{name}: bad byte count after '.'"));
            }
            if bytes > 8 {
                return Err(format!("%{name}: byte count {bytes} is more than 8"));
            }
            // As pttc computes the mask on x86-64: a shift by 64 is a shift by 0, so ".8"
            // keeps nothing.
            addr &= 1u64.wrapping_shl((bytes * 8) as u32).wrapping_sub(1);
            unknown = 8 - bytes as usize;
            s = &r[used..];
        }
        if qmark {
            for _ in 0..unknown {
                out.push_str("??");
            }
            for i in unknown..8 {
                out.push_str(&format!("{:02x}", (addr >> ((7 - i) * 8)) as u8));
            }
        } else if zero {
            out.push_str(&format!("{addr:016x}"));
        } else {
            out.push_str(&format!("{addr:x}"));
        }
        rest = s;
    }
    out.push_str(rest);
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> (Labels, Labels) {
        let mut y = Labels::default();
        y.add("l1", 0xffffff004c).unwrap();
        y.add("l5", 0xc0001).unwrap();
        let mut d = Labels::default();
        d.add("p1", 0x10).unwrap();
        (y, d)
    }

    fn render(line: &str) -> Result<Option<String>, String> {
        let (y, d) = labels();
        render_line(line, &y, &d)
    }

    #[test]
    fn references() {
        assert_eq!(render("; %l1").unwrap().unwrap(), " ffffff004c");
        assert_eq!(render(";%0l1 # call").unwrap().unwrap(), "000000ffffff004c");
        assert_eq!(render(";%l1.2").unwrap().unwrap(), "4c");
        assert_eq!(render(";%?l5.2").unwrap().unwrap(), "????????????0001");
        assert_eq!(render(";%?l5.0").unwrap().unwrap(), "????????????????");
        assert_eq!(render(";%?l5").unwrap().unwrap(), "00000000000c0001");
        assert_eq!(
            render(";x: %0l5, %?l5.4.").unwrap().unwrap(),
            "x: 00000000000c0001, ????????000c0001."
        );
        // Directive labels: hex, padded with 0 for both prefixes, a mask left as text.
        assert_eq!(render(";%0p1  psb").unwrap().unwrap(), "0000000000000010  psb");
        assert_eq!(render(";%?p1.2").unwrap().unwrap(), "0000000000000010.2");
        assert_eq!(render(";%p1").unwrap().unwrap(), "10");
    }

    #[test]
    fn lines_and_errors() {
        assert_eq!(render("nop").unwrap(), None);
        assert_eq!(render("; text   # note  ").unwrap().unwrap(), " text");
        assert_eq!(render(";").unwrap().unwrap(), "");
        assert!(render("; %nowhere").is_err());
        assert!(render("; % l1").is_err());
        assert!(render("; %").is_err());
        assert!(render("; %l1.9").is_err());
        assert!(render("; %l1.x").is_err());
    }
}
