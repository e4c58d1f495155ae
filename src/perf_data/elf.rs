//! The code image as a minimal ELF executable (`DIR/image.elf`), so perf finds the code through
//! the MMAP2 record that maps it (`spec/perf-data.md`). Written with the `object` crate's ELF
//! writer: one `PT_LOAD` (read, execute) and a `.text` section over the same bytes.

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

/// An ELF image of `code` loaded at `base`, and the file offset of the code (the MMAP2 record's
/// `pgoff`, [`code_offset`]).
pub fn image(code: &[u8], base: u64) -> (Vec<u8>, u64) {
    let mut buf = Vec::new();
    let mut w = Writer::new(Endianness::Little, true, &mut buf);
    w.reserve_file_header();
    w.reserve_program_headers(1);
    let text_name = w.add_section_name(b".text");
    w.reserve_null_section_index();
    w.reserve_section_index();
    w.reserve_shstrtab_section_index();
    // The file offset and the load address agree modulo the page (the ELF rule for PT_LOAD).
    let page_start = w.reserve(0, PAGE as usize);
    w.reserve_until(page_start + (base % PAGE) as usize);
    let text_offset = w.reserve(code.len(), 1) as u64;
    debug_assert_eq!(text_offset, code_offset(base));
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
    w.write_shstrtab_section_header();
    (buf, text_offset)
}
