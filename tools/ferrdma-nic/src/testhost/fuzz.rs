//! fuzz placeholder
