//! The code image as a minimal ELF executable (`DIR/image.elf`), so perf finds the code through
//! the MMAP2 record that maps it (`spec/perf-data.md`). Written with the `object` crate's ELF
//! writer: one `PT_LOAD` (read, execute), a `.text` section over the same bytes, and a symbol
//! table naming the functions the code calls (`fn_<address>`, PD11), so perf names code by
//! function as it does a real program's.

use object::elf;
use object::write::elf::{FileHeader, ProgramHeader, SectionHeader, Writer};
use object::Endianness;

/// Alignment of the code in the file (and of the load segment).
pub const PAGE: u64 = 4096;

/// The file offset of the code in [`image`]'s file for code loaded at `base`: the page after the
/// headers, plus `base`'s offset in its page (file offset and address agree modulo the page).
pub fn code_offset(base: u64) -> u64 {
    PAGE + base % PAGE
}

/// Where `code`, loaded at `base`, has functions: `base` and every target of a direct near CALL
/// found by decoding the bytes in order (64-bit) that lies inside the code, in address order. A
/// synthesized image may hold bytes that were never run: a call read from them names a function
/// that is not one, which costs a wrong name, never a wrong address.
pub fn function_starts(code: &[u8], base: u64) -> Vec<u64> {
    use iced_x86::{Decoder, DecoderOptions, FlowControl};
    let end = base.saturating_add(code.len() as u64);
    let mut starts = vec![base];
    let mut d = Decoder::with_ip(64, code, base, DecoderOptions::NONE);
    while d.can_decode() {
        let insn = d.decode();
        if insn.flow_control() == FlowControl::Call && insn.is_call_near() {
            let to = insn.near_branch_target();
            if (base..end).contains(&to) {
                starts.push(to);
            }
        }
    }
    starts.sort_unstable();
    starts.dedup();
    starts
}

/// An ELF image of `code` loaded at `base`, and the file offset of the code (the MMAP2 record's
/// `pgoff`, [`code_offset`]).
pub fn image(code: &[u8], base: u64) -> (Vec<u8>, u64) {
    let starts = if code.is_empty() {
        Vec::new()
    } else {
        function_starts(code, base)
    };
    let names: Vec<Vec<u8>> = starts.iter().map(|a| format!("fn_{a:x}").into_bytes()).collect();
    let mut buf = Vec::new();
    let mut w = Writer::new(Endianness::Little, true, &mut buf);
    w.reserve_file_header();
    w.reserve_program_headers(1);
    let text_name = w.add_section_name(b".text");
    w.reserve_null_section_index();
    let text = w.reserve_section_index();
    let symbols: Vec<_> = names
        .iter()
        .map(|n| (w.add_string(n), w.reserve_symbol_index(Some(text))))
        .collect();
    w.reserve_symtab_section_index();
    w.reserve_strtab_section_index();
    w.reserve_shstrtab_section_index();
    // The file offset and the load address agree modulo the page (the ELF rule for PT_LOAD).
    let page_start = w.reserve(0, PAGE as usize);
    w.reserve_until(page_start + (base % PAGE) as usize);
    let text_offset = w.reserve(code.len(), 1) as u64;
    debug_assert_eq!(text_offset, code_offset(base));
    w.reserve_symtab();
    w.reserve_strtab();
    w.reserve_shstrtab();
    w.reserve_section_headers();
    let len = code.len() as u64;
    w.write_file_header(&FileHeader {
        os_abi: elf::ELFOSABI_NONE,
        abi_version: 0,
        e_type: elf::ET_EXEC,
        e_machine: elf::EM_X86_64,
        e_entry: base,
        e_flags: 0,
    })
    .expect("an ELF64 header for x86-64 is valid");
    w.write_align_program_headers();
    w.write_program_header(&ProgramHeader {
        p_type: elf::PT_LOAD,
        p_flags: elf::PF_R | elf::PF_X,
        p_offset: text_offset,
        p_vaddr: base,
        p_paddr: base,
        p_filesz: len,
        p_memsz: len,
        p_align: PAGE,
    });
    w.pad_until(text_offset as usize);
    w.write(code);
    // A function runs to the next one, the last to the end of the code.
    w.write_null_symbol();
    for (k, &(name, _)) in symbols.iter().enumerate() {
        let next = starts.get(k + 1).copied().unwrap_or(base + len);
        w.write_symbol(&object::write::elf::Sym {
            name: Some(name),
            section: Some(text),
            st_info: (elf::STB_GLOBAL << 4) | elf::STT_FUNC,
            st_other: elf::STV_DEFAULT,
            st_shndx: 0,
            st_value: starts[k],
            st_size: next - starts[k],
        });
    }
    w.write_strtab();
    w.write_shstrtab();
    w.write_null_section_header();
    w.write_section_header(&SectionHeader {
        name: Some(text_name),
        sh_type: elf::SHT_PROGBITS,
        sh_flags: u64::from(elf::SHF_ALLOC | elf::SHF_EXECINSTR),
        sh_addr: base,
        sh_offset: text_offset,
        sh_size: len,
        sh_link: 0,
        sh_info: 0,
        sh_addralign: 16,
        sh_entsize: 0,
    });
    w.write_symtab_section_header(1);
    w.write_strtab_section_header();
    w.write_shstrtab_section_header();
    (buf, text_offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object, ObjectSymbol};

    /// PD11: the image names `base` and each function a direct CALL reaches, each sized to the
    /// next; a call out of the code names nothing.
    #[test]
    fn pd11_the_image_names_the_functions_the_code_calls() {
        // 0x1000: call 0x1008; call 0x9000 (outside); ret; 0x1008: nop; ret
        let code = [0xe8, 0x03, 0, 0, 0, 0xc3, 0x90, 0x90, 0x90, 0xc3];
        let code = [&code[..5], &[0xe8, 0xf6, 0x7f, 0, 0][..], &code[5..]].concat();
        let base = 0x1000;
        assert_eq!(function_starts(&code, base), [0x1000, 0x1008]);
        let (bytes, _) = image(&code, base);
        let file = object::File::parse(&bytes[..]).unwrap();
        let syms: Vec<(String, u64, u64)> = file
            .symbols()
            .map(|s| (s.name().unwrap().to_string(), s.address(), s.size()))
            .collect();
        assert_eq!(
            syms,
            [
                ("fn_1000".to_string(), 0x1000, 8),
                ("fn_1008".to_string(), 0x1008, code.len() as u64 - 8)
            ]
        );
    }
}
