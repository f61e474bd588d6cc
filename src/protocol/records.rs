//! Record batch codec.
