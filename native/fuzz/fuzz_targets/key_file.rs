//! libFuzzer on `tachyon_fuzz_targets::guard::key_file` (what it covers: that function's doc).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tachyon_fuzz_targets::guard::key_file(data));
