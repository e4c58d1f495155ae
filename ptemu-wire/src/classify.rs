//! Each instruction QEMU translated, classified once by what PT makes of it (spec/qemu.md QE3):
//! `ptemu run`'s events of a user-mode program and the system-mode flow ([`crate::flow`]) take
//! an instruction's kind from here.

use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, Register};

/// What kind of instruction, as far as the trace is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Anything that goes on to the next instruction.
    Plain,
    /// A REP/REPNE string instruction: QEMU runs it once an iteration, PT counts it once.
    RepString,
    /// Jcc, JrCXZ, LOOPcc to the target.
    Conditional,
    /// A direct near JMP to the target.
    Jump,
    /// A direct near CALL to the target.
    Call,
    /// An indirect near JMP.
    IndirectJump,
    /// An indirect near CALL.
    IndirectCall,
    /// A near RET.
    Return,
    /// SYSCALL or SYSENTER: into the kernel and back after it.
    Syscall,
    /// INT n, INT3, INTO, INT1: an interrupt with this vector.
    SoftwareInterrupt(u8),
    /// A far JMP, CALL or RET.
    Far,
    /// IRET.
    Iret,
    /// An instruction QEMU put in a block and then took back out (QE14): the last of a block of
    /// several that crosses into the next page. QEMU 7.2 ends the block before it, but still
    /// lists it to the plugin (with only its bytes up to the page's end) and counts it in the
    /// block's execution: it runs as the first instruction of the next block.
    Undone,
}

/// One translated instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Its guest address.
    pub ip: u64,
    /// Its length in bytes.
    pub len: u8,
    /// What it is.
    pub kind: Kind,
    /// A direct branch's target (0 otherwise).
    pub target: u64,
    /// It is a MOV to CR3 ([`is_cr3_write`]).
    pub cr3_write: bool,
}

impl Insn {
    /// The address after it.
    pub fn next(&self) -> u64 {
        self.ip.wrapping_add(u64::from(self.len))
    }
}

/// Classifies the instruction at `ip` that `code` starts with (64-bit code; at most 15 bytes
/// are looked at); the error says why it cannot be: bytes that do not decode.
pub fn classify(ip: u64, code: &[u8]) -> Result<Insn, String> {
    let bytes = &code[..code.len().min(15)];
    let mut d = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let i = d.decode();
    if i.is_invalid() {
        return Err(format!(
            "the bytes {} at {ip:#x} do not decode as x86-64",
            hex(bytes)
        ));
    }
    let (kind, target) = kind_of(&i);
    Ok(Insn {
        ip,
        len: i.len() as u8,
        kind,
        target,
        cr3_write: is_cr3_write(&i),
    })
}

/// The kind of a decoded (valid) instruction, and a direct branch's target (0 otherwise).
pub fn kind_of(i: &Instruction) -> (Kind, u64) {
    let far = i.is_jmp_far() || i.is_call_far() || i.is_jmp_far_indirect() || i.is_call_far_indirect();
    // By mnemonic first: iced counts SYSCALL as a call and INT n as an interrupt.
    let special = match i.mnemonic() {
        Mnemonic::Syscall | Mnemonic::Sysenter => Some(Kind::Syscall),
        Mnemonic::Int => Some(Kind::SoftwareInterrupt(i.immediate8())),
        Mnemonic::Int3 => Some(Kind::SoftwareInterrupt(3)),
        Mnemonic::Into => Some(Kind::SoftwareInterrupt(4)),
        Mnemonic::Int1 => Some(Kind::SoftwareInterrupt(1)),
        Mnemonic::Iret | Mnemonic::Iretd | Mnemonic::Iretq => Some(Kind::Iret),
        Mnemonic::Retf => Some(Kind::Far),
        // SYSRET and SYSEXIT fault at CPL 3 (a signal): they go nowhere of their own in a
        // user-mode program (the system-mode flow tells them by `is_sysret`).
        Mnemonic::Sysret | Mnemonic::Sysretq | Mnemonic::Sysexit | Mnemonic::Sysexitq => Some(Kind::Plain),
        _ => None,
    };
    match i.flow_control() {
        _ if special.is_some() => (special.expect("checked"), 0),
        _ if far => (Kind::Far, 0),
        FlowControl::ConditionalBranch => (Kind::Conditional, i.near_branch_target()),
        FlowControl::UnconditionalBranch => (Kind::Jump, i.near_branch_target()),
        FlowControl::Call => (Kind::Call, i.near_branch_target()),
        FlowControl::IndirectBranch => (Kind::IndirectJump, 0),
        FlowControl::IndirectCall => (Kind::IndirectCall, 0),
        FlowControl::Return => (Kind::Return, 0),
        _ if i.is_string_instruction() && (i.has_rep_prefix() || i.has_repne_prefix()) => {
            (Kind::RepString, 0)
        }
        _ => (Kind::Plain, 0),
    }
}

/// Whether the instruction is a MOV to CR3: the write a PIP packet reports (pt-packets.md case
/// 5d), after which the system-mode plugin reads the registers (QE25).
pub fn is_cr3_write(i: &Instruction) -> bool {
    i.code() == Code::Mov_cr_r64 && i.op0_register() == Register::CR3
}

/// Whether the instruction is SYSRET or SYSEXIT: the kernel's way back to user mode, a far
/// transfer in system mode ([`kind_of`] calls it plain, for user mode's sake).
pub fn is_sysret(i: &Instruction) -> bool {
    matches!(
        i.mnemonic(),
        Mnemonic::Sysret | Mnemonic::Sysretq | Mnemonic::Sysexit | Mnemonic::Sysexitq
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(bytes: &[u8]) -> (Kind, u64) {
        let i = classify(0x1000, bytes).unwrap();
        (i.kind, i.target)
    }

    /// QE3: every class, from real encodings.
    #[test]
    fn qe3_instructions_are_classified_by_what_pt_makes_of_them() {
        assert_eq!(kind(&[0x48, 0x89, 0xc3]), (Kind::Plain, 0)); // mov rbx, rax
        assert_eq!(kind(&[0x74, 0x10]), (Kind::Conditional, 0x1012)); // je
        assert_eq!(kind(&[0xe3, 0x02]), (Kind::Conditional, 0x1004)); // jrcxz
        assert_eq!(kind(&[0xe2, 0xfe]), (Kind::Conditional, 0x1000)); // loop
        assert_eq!(kind(&[0xeb, 0x00]), (Kind::Jump, 0x1002)); // jmp
        assert_eq!(kind(&[0xe8, 0, 0, 0, 0]), (Kind::Call, 0x1005)); // call
        assert_eq!(kind(&[0xff, 0xe0]), (Kind::IndirectJump, 0)); // jmp rax
        assert_eq!(kind(&[0xff, 0xd0]), (Kind::IndirectCall, 0)); // call rax
        assert_eq!(kind(&[0xc3]), (Kind::Return, 0)); // ret
        assert_eq!(kind(&[0xf3, 0xc3]), (Kind::Return, 0)); // repz ret
        assert_eq!(kind(&[0xc2, 8, 0]), (Kind::Return, 0)); // ret 8
        assert_eq!(kind(&[0x0f, 0x05]), (Kind::Syscall, 0)); // syscall
        assert_eq!(kind(&[0xcd, 0x80]), (Kind::SoftwareInterrupt(0x80), 0));
        assert_eq!(kind(&[0xcc]), (Kind::SoftwareInterrupt(3), 0));
        assert_eq!(kind(&[0xf3, 0xa4]), (Kind::RepString, 0)); // rep movsb
        assert_eq!(kind(&[0xf2, 0xae]), (Kind::RepString, 0)); // repne scasb
        assert_eq!(kind(&[0xa4]), (Kind::Plain, 0)); // movsb
        assert_eq!(kind(&[0xf3, 0x90]), (Kind::Plain, 0)); // pause
        assert_eq!(kind(&[0x48, 0xcf]), (Kind::Iret, 0)); // iretq
        assert_eq!(kind(&[0xcb]), (Kind::Far, 0)); // retf
        assert_eq!(kind(&[0xff, 0x28]), (Kind::Far, 0)); // jmp far [rax]
        assert_eq!(classify(0x1000, &[0x0f, 0x0b, 0x90]).unwrap().len, 2); // ud2, then more code
        assert!(classify(0x1000, &[0x0f, 0x22, 0xd8]).unwrap().cr3_write); // mov cr3, rax
        assert!(!classify(0x1000, &[0x0f, 0x20, 0xd8]).unwrap().cr3_write); // mov rax, cr3
        assert!(!classify(0x1000, &[0x0f, 0x22, 0xc0]).unwrap().cr3_write); // mov cr0, rax
        assert!(classify(0x1000, &[0x0f]).unwrap_err().contains("do not decode"));
    }
}
