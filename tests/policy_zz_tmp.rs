#[test]
#[ignore]
fn dump() {
    let inp = std::fs::read_to_string("/tmp/cmp_in.json").unwrap();
    let out = car_runtime::api::policy::permission_classify(&inp).unwrap();
    std::fs::write("/tmp/cmp_ours.json", out).unwrap();
}
