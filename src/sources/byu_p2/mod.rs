//! BYU p2AddrTr.
