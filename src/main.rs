fn main() {
    std::process::exit(ncclprobe::run_cli());
}
