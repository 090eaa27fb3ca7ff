fn main() {
    ncclprobe::exit::end(ncclprobe::run_cli());
}
