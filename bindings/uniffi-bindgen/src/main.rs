//! `uniffi-bindgen` on the workspace's pinned uniffi version (a bindgen of
//! another version fails with a misleading "invalid utf-8" error).
fn main() {
    uniffi::uniffi_bindgen_main()
}
