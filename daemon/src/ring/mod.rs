//! Pure walks over ring-buffer bytes: no syscalls, no `unsafe`.
