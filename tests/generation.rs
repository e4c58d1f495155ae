//! Unit tests for each packet-generation rule of spec/generation.md (test names carry the IDs).

mod common;

use common::trace::*;
use ptemu::regs::RtitCtl;
use ptemu::tracer::{Event, TracerConfig};

fn user() -> RtitCtl {
    RtitCtl::new().with_branch_en(true).with_user(true)
}

#[test]
fn smoke() {
    let mut r = TraceRig::new(TracerConfig::default());
    r.start(user().with_tsc_en(true));
    r.evs(&[
        Event::CondBranch {
            ip: 0x401000,
            len: 2,
            target: 0x401100,
            taken: true,
        },
        Event::Call {
            ip: 0x401100,
            len: 5,
            target: 0x402000,
        },
        Event::Return {
            ip: 0x402010,
            target: 0x401105,
        },
        Event::IndirectJump {
            ip: 0x401105,
            target: 0x403000,
        },
    ]);
    r.stop_at(0x403000);
    println!("{:?}", r.packets());
}
