#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| (lachesis_fuzz::targets::get("kv_protocol").check)(data));
