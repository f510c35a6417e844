//! Policy profiles and their evaluation.
