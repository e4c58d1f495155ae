//! The architectural state the tracer follows from its events: what the context packets report
//! (PIP, VMCS, MODE.Exec) and what filtering tests (CPL, CR3).

use super::{ExecMode, FarKind};

/// The processor state the tracer keeps between events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ArchState {
    /// Current privilege level (0..=3).
    pub cpl: u8,
    /// CR3.
    pub cr3: u64,
    /// Execution mode (MODE.Exec).
    pub mode: ExecMode,
    /// RFLAGS.IF (MODE.Exec's IF bit with EventEn).
    pub if_flag: bool,
    /// The VMCS pointer of the last VM entry (VMCS packet).
    pub vmcs: Option<u64>,
}

impl Default for ArchState {
    /// User mode, 64-bit, interrupts on, CR3 0, no VMCS.
    fn default() -> Self {
        ArchState {
            cpl: 3,
            cr3: 0,
            mode: ExecMode::Bits64,
            if_flag: true,
            vmcs: None,
        }
    }
}

impl ArchState {
    /// A far transfer's effect: the new CPL and mode, CR3 when it loads one, the VMCS pointer
    /// of a VM entry. Returns whether CR3 changed.
    #[inline]
    pub fn far(&mut self, kind: FarKind, cpl: u8, mode: ExecMode, cr3: Option<u64>) -> bool {
        let cr3_changed = cr3.is_some_and(|c| c != self.cr3);
        self.cpl = cpl;
        self.mode = mode;
        self.cr3 = cr3.unwrap_or(self.cr3);
        if let FarKind::VmEntry { vmcs } = kind {
            self.vmcs = Some(vmcs);
        }
        cr3_changed
    }
}
