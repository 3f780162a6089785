//! The counter ifunc in Rust: adds the payload's 64-bit increment (1 if the
//! payload is empty) to the 64-bit total the target passes as target_args.
#![no_std]

#[no_mangle]
pub unsafe extern "C" fn rust_counter_main(payload: *const u8, payload_size: usize, total: *mut u64) {
    let increment = if payload_size >= 8 { core::ptr::read_unaligned(payload as *const u64) } else { 1 };
    *total = (*total).wrapping_add(increment);
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}
