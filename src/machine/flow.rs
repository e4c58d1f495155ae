//! The plugin's stream of a machine followed (QE26): block records into a
//! [`ptemu_wire::system::Replay`], each vCPU's chunk of executed blocks and registers records
//! through it, and what came out counted per vCPU.

use super::MachineError;
use ptemu_wire::flow::BlockFlow;
use ptemu_wire::system::{Execution, Replay, Transfer};
use ptemu_wire::{Batched, Reader, Record};
use std::io::Read;
use std::path::Path;
use std::process::ExitStatus;

/// What one vCPU ran, as the stream told it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct VcpuFlow {
    /// Block executions.
    pub blocks: u64,
    /// Instructions that retired (each block's, up to where a fault stopped it).
    pub instructions: u64,
    /// Block executions a fault stopped part-way.
    pub faults: u64,
    /// Block executions QEMU ended part-way with no transfer (splits, QE26).
    pub splits: u64,
    /// Of the splits, those whose next block is one instruction that writes memory: where
    /// QEMU may have run a store again that changed its own block's code (it starts the store,
    /// finds its block changed, and runs it again alone).
    pub store_restarts: u64,
    /// Exceptions, interrupts and software interrupts, in order (QE25).
    pub entries: Vec<Transfer>,
    /// Far transfers by a block's last instruction (SYSCALL, SYSRET, IRET, far branches).
    pub far: u64,
    /// Entry points with a frame that fits nothing (never expected).
    pub unexplained: u64,
    /// CR3 values taken (a new value in a registers record).
    pub cr3_values: u64,
    last_cr3: u64,
}

/// What a machine's recording found.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct MachineFlow {
    /// How QEMU ended.
    pub status: Option<ExitStatus>,
    /// The serial console's output, where captured.
    pub console: Option<Vec<u8>>,
    /// Every vCPU's, by index.
    pub vcpus: Vec<VcpuFlow>,
    /// The instructions of every block executed, each block counted whole, by the plugin's
    /// count (its end record), which the stream's executions are checked against; more than
    /// were retired where faults and splits stopped blocks part-way.
    pub plugin_instructions: u64,
    /// The stream's length in bytes.
    pub stream_bytes: u64,
    /// The console showed the kernel's panic message ("Kernel panic - not syncing").
    pub panicked: bool,
}

impl MachineFlow {
    /// Every vCPU's retired instructions.
    pub fn instructions(&self) -> u64 {
        self.vcpus.iter().map(|v| v.instructions).sum()
    }
}

fn stream_error(qemu: &Path, offset: u64, message: impl std::fmt::Display) -> MachineError {
    MachineError::Stream {
        path: qemu.to_path_buf(),
        message: format!("byte offset {offset}: {message}"),
    }
}

/// What follows the stream besides the counts: each block record as it comes (its index is the
/// number of blocks before it) and each execution, in its vCPU's order. `Err`: the message of
/// what cannot go on (at the stream's offset then).
pub(super) trait Watch {
    /// A block record, with the flow [`Replay`] made of it.
    fn block(&mut self, vaddr: u64, offsets: &[u32], code: &[u8], flow: &BlockFlow) -> Result<(), String>;
    /// An execution.
    fn exec(&mut self, e: &Execution) -> Result<(), String>;
}

impl Watch for () {
    fn block(&mut self, _: u64, _: &[u32], _: &[u8], _: &BlockFlow) -> Result<(), String> {
        Ok(())
    }
    fn exec(&mut self, _: &Execution) -> Result<(), String> {
        Ok(())
    }
}

/// Reads the plugin's stream from `input` to its end record and follows every vCPU, each
/// block record and execution shown to `watch`.
pub(super) fn follow(
    input: &mut impl Read,
    qemu: &Path,
    watch: &mut dyn Watch,
) -> Result<MachineFlow, MachineError> {
    let mut reader = Reader::new(input);
    let mut replay = Replay::new();
    let mut flow = MachineFlow::default();
    let mut whole = 0u64;
    let mut vcpu: Option<usize> = None;
    let took = |flow: &mut MachineFlow, whole: &mut u64, watch: &mut dyn Watch, e: Execution| {
        let k = e.vcpu as usize;
        let watched = watch.exec(&e);
        if flow.vcpus.len() <= k {
            flow.vcpus.resize_with(k + 1, VcpuFlow::default);
        }
        let v = &mut flow.vcpus[k];
        v.blocks += 1;
        v.instructions += u64::from(e.retired);
        v.faults += u64::from(e.faulted);
        *whole += u64::from(e.len);
        watched
    };
    let mut ended = None;
    loop {
        let at = reader.offset();
        let rec = reader
            .next_batched()
            .map_err(|e| stream_error(qemu, e.offset, &e))?;
        let Some(rec) = rec else { break };
        match rec {
            Batched::Blocks(batch) => {
                if vcpu.is_none() {
                    return Err(stream_error(qemu, at, "executed blocks outside a vCPU's chunk"));
                }
                for index in batch.indices() {
                    // At most one execution comes out of each: no buffer between.
                    let mut watched = Ok(());
                    replay
                        .exec(index, &mut |e| {
                            if watched.is_ok() {
                                watched = took(&mut flow, &mut whole, &mut *watch, e);
                            }
                        })
                        .map_err(|m| stream_error(qemu, at, m))?;
                    watched.map_err(|m| stream_error(qemu, at, m))?;
                }
            }
            Batched::Record(Record::Block {
                vaddr, offsets, code, ..
            }) => {
                replay.block(vaddr, offsets, code);
                let f = replay.flow(replay.blocks() as u32 - 1).expect("just fed");
                watch
                    .block(vaddr, offsets, code, f)
                    .map_err(|m| stream_error(qemu, at, m))?;
            }
            Batched::Record(Record::Thread { tid }) => {
                vcpu = tid.checked_sub(1).map(|k| k as usize);
                if let Some(k) = vcpu {
                    replay
                        .vcpu(k.min(u32::MAX as usize) as u32)
                        .map_err(|m| stream_error(qemu, at, m))?;
                    if flow.vcpus.len() <= k {
                        flow.vcpus.resize_with(k + 1, VcpuFlow::default);
                    }
                }
            }
            Batched::Record(Record::Registers(r)) => {
                let Some(k) = vcpu else {
                    return Err(stream_error(
                        qemu,
                        at,
                        "a registers record outside a vCPU's chunk",
                    ));
                };
                replay.registers(&r).map_err(|m| stream_error(qemu, at, m))?;
                let v = &mut flow.vcpus[k];
                if r.cr3 != v.last_cr3 {
                    v.cr3_values += 1;
                    v.last_cr3 = r.cr3;
                }
                match r.transfer {
                    Transfer::Split { .. } => {
                        v.splits += 1;
                        let one = replay.current().and_then(|b| replay.flow(b));
                        v.store_restarts += u64::from(one.is_some_and(|f| f.single_store));
                    }
                    Transfer::Far => v.far += 1,
                    Transfer::Unexplained { .. } => v.unexplained += 1,
                    Transfer::SoftInt { .. } | Transfer::Async { .. } => v.entries.push(r.transfer),
                    _ => {}
                }
            }
            Batched::Record(Record::End { executed }) => ended = Some((executed, at)),
            Batched::Record(other) => {
                return Err(stream_error(
                    qemu,
                    at,
                    format!("a record a machine's stream does not hold: {other:?}"),
                ))
            }
        }
    }
    let mut got = Vec::new();
    replay.finish(&mut |e| got.push(e));
    let end = reader.offset();
    for e in got {
        took(&mut flow, &mut whole, watch, e).map_err(|m| stream_error(qemu, end, m))?;
    }
    let Some((executed, at)) = ended else {
        return Err(stream_error(
            qemu,
            reader.offset(),
            "the stream ends without its end record: QEMU did not exit normally",
        ));
    };
    flow.plugin_instructions = executed;
    flow.stream_bytes = reader.offset();
    if whole != executed {
        return Err(stream_error(
            qemu,
            at,
            format!(
                "the plugin counted {executed} instructions in the blocks it ran, the stream holds {whole}"
            ),
        ));
    }
    Ok(flow)
}
