//! Placeholder: being written (issue #7).
