//! The signal handling of the `ptemu` binary: SIGINT, SIGTERM and SIGHUP clean up what a command
//! registered and end the process with 128 + N ([`ptemu::case::cleanup`], which keeps the
//! registry and the forwarding to QEMU, QE20).

use std::sync::Once;

static INSTALL: Once = Once::new();

/// Starts the thread that cleans up on SIGINT, SIGTERM and SIGHUP (once per process); `run`
/// calls it first, so a signal at any moment ends the process with 128 + N, whatever the
/// disposition it inherited (a shell starts background jobs with SIGINT ignored). If the handler
/// cannot be installed the signals keep their default action (no cleanup, but no harm).
pub fn install() {
    INSTALL.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        use signal_hook::iterator::exfiltrator::WithRawSiginfo;
        let Ok(mut signals) =
            signal_hook::iterator::SignalsInfo::<WithRawSiginfo>::new([SIGINT, SIGTERM, SIGHUP])
        else {
            return;
        };
        let _ = std::thread::Builder::new()
            .name("ptemu-signals".into())
            .spawn(move || {
                if let Some(info) = signals.forever().next() {
                    // QE20: the traced program (QEMU) is handed the signal, and ends, before
                    // ptemu does. SI_KERNEL: a terminal's signal, sent to the whole group.
                    ptemu::case::cleanup::exit_on_signal(info.si_signo, info.si_code == libc::SI_KERNEL);
                }
            });
    });
}
