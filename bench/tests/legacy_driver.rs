//! The generator also runs on monoio's epoll driver (kernels without io_uring). Its own test
//! binary, because the driver is chosen from an environment variable for the whole process.

mod common;

use common::TestServer;

#[test]
fn runs_on_the_epoll_driver() {
    std::env::set_var("MONOIO_FORCE_LEGACY_DRIVER", "1");
    let server = TestServer::start();
    let cfg = server.config(
        "/ok",
        "--rate 200 --duration 200ms --warmup 0 --arrivals uniform",
    );
    let report = inferrail_bench::run(&cfg).unwrap();
    assert_eq!(report.driver, "epoll");
    assert_eq!(report.completed, 40);
    assert_eq!(report.errors.total(), 0);
}
