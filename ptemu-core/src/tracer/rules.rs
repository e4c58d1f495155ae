//! Generation rule IDs, as cited in `spec/generation.md` (pt-packets.md §5).

use crate::rules::rule_ids;

rule_ids! {
    /// A packet-generation rule of `spec/generation.md`.
    GenRule, "spec/generation.md";
    /// PSB+ holds TSC, TMA, CBR, PIP, VMCS, MODE.TSX, MODE.Exec + FUP as the settings enable, then PSBEND.
    PSB1,
    /// A PSB+ goes out at the first event boundary after 2^(PSBFreq+11) bytes since the last one.
    PSB2,
    /// TraceEn 0->1 sends a PSB+ when PacketByteCnt = 0 or PSB is not configurable.
    PSB3,
    /// At a PSB the TNT is flushed first, and last IP and the RET stack restart.
    PSB4,
    /// One TNT bit per conditional branch, 1 = taken, the oldest in the highest bit.
    TNT1,
    /// A TNT goes out when it holds 6 bits (47 with long TNT).
    TNT2,
    /// A partial TNT is flushed before any other non-timing packet.
    TNT3,
    /// DisTNT: no TNT packets; conditional branches leave no trace and returns are TIPs.
    TNT4,
    /// The RET stack: 64 entries, calls push their next IP, the oldest falls off, zero-length calls are not pushed.
    RET1,
    /// A RET to the top of the stack is a TNT 1 bit and pops (DisRETC = 0); otherwise a TIP, no pop.
    RET2,
    /// The RET stack is cleared at PSB and OVF.
    RET3,
    /// Indirect JMP and CALL: TIP(target).
    TIP1,
    /// Far branches (SYSCALL, SYSRET, IRET, far JMP/CALL/RET, VM entry): \[PIP\] \[MODE.Exec\] TIP(target).
    TIP2,
    /// Asynchronous transfers (interrupt, exception, INT n, VM exit): FUP(source) \[PIP\] \[MODE.Exec\] TIP(target).
    TIP3,
    /// IP compression: the shortest update form that matches last IP, else sext-48, else full.
    TIP4,
    /// PacketEn 0->1: [MODE.Exec] TIP.PGE(IP).
    PGE1,
    /// MODE.Exec precedes TIP.PGE when the mode changed or none was sent since the last PSB.
    PGE2,
    /// Leaving an IP filter range: TIP.PGD(target); by a Jcc or compressed RET: TNT, TIP.PGD().
    PGD1,
    /// Leaving the traced context (CPL, CR3): TIP.PGD() with the IP suppressed; asynchronous: FUP, TIP.PGD().
    PGD2,
    /// WRMSR clearing TraceEn: FUP(CLIP), TIP.PGD(), then the buffered bytes are flushed.
    PGD3,
    /// ContextEn = (CPL 0 ? OS : User) and, with CR3Filter, CR3 = CR3_MATCH.
    FLT1,
    /// FilterEn: with any ADDRn_CFG = 1, the IP is inside one of those ranges.
    FLT2,
    /// Entering an ADDRn_CFG = 2 range: [TIP.PGD(target)], TraceStop, then STATUS.Stopped.
    FLT3,
    /// MOV CR3 with OS = 1: PIP(new CR3).
    PIP1,
    /// A far transfer that changes CS.L/CS.D sends MODE.Exec before its TIP.
    MODE1,
    /// TSC (and TMA with MTCEn) in PSB+ and at enable.
    TIM1,
    /// MTC each time ART[MTCFreq+7:MTCFreq] changes (the latest value when several periods passed).
    TIM2,
    /// CYC before a CYC-eligible packet once 2^(CycThresh-1) cycles passed (any with CycThresh = 0).
    TIM3,
    /// CBR in PSB+, at enable and when the ratio changes.
    TIM4,
    /// After a wake-up with TSCEn: TSC (and TMA) for the lost time.
    TIM5,
    /// PTWRITE with PTWEn: PTW, and FUP(IP) with FUPonPTW.
    PTW1,
    /// PwrEvtEn: MWAIT, PWRE, EXSTOP (with FUP while PacketEn), PWRX.
    PWR1,
    /// EventEn: EVD(CR2) for #PF and CFE(type, vector) before the FUP of interrupts; CFE(IRET) before an IRET's TIP.
    EVT1,
    /// Back-pressure: output drains at a configured rate; an event whose packets do not fit is dropped whole, as is everything until the buffer empties.
    OVF1,
    /// When the overflow clears: OVF, then FUP(current IP) if PacketEn (TIP.PGE later otherwise).
    OVF2,
    /// At OVF last IP restarts, the RET stack and the TNT are cleared; with CYCEn a CYC covers the overflow.
    OVF3,
    /// Packet bytes go to the output unit in batches; TraceEn = 0 and `flush` write them all.
    OUT1,
    /// STOP (ToPA or TraceStop) and operational errors end generation: buffered bytes are lost, nothing more is generated.
    OUT2,
    /// A block (start, instruction lengths, how it ends) stands for its instructions: each but the last retires, the last one branches toward where the execution went.
    BLK1,
    /// An execution goes where its block can: the fall-through, a conditional's target or fall-through, a direct target, anywhere after an indirect branch or RET; any other is refused before the batch is traced.
    BLK2,
    /// Fed as blocks, executions leave the bytes, PMIs, statistics and truth of the events they stand for.
    BLK3,
    /// Where no per-instruction rule applies inside a block, an execution is one step: its packets sit at its last instruction.
    BLK4,
    /// A chain of executions names the blocks that ran one after another: each goes on at the next one's start, the last where the chain says.
    BLK5,
}
