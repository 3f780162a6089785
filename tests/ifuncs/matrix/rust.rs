//! A Rust ifunc (Debian's rustc, no_std): an extern "C" entry that fills the
//! matrix result with an iterator fold and a checked sum over the payload.
#![no_std]

#[repr(C)]
pub struct MatrixResult {
    values: [i64; 8],
    text: [u8; 64],
    calls: i64,
}

#[no_mangle]
pub unsafe extern "C" fn rust_main(payload: *const u8, payload_size: usize, target_args: *mut MatrixResult) {
    let r = &mut *target_args;
    r.values[0] = (1..=16i64).map(|i| i * (17 - i)).fold(0, |a, b| a + b);
    let given = core::slice::from_raw_parts(payload as *const i64, payload_size / 8);
    r.values[1] = given.iter().fold(0i64, |a, &b| a.wrapping_add(b));
    r.calls += 1;
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}
