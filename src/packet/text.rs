//! Text form (filled in below).
