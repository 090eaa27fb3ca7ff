use super::*;

#[test]
fn reads_old_tabbed_matrix_with_soc() {
    let t = parse_str("\tGPU0\tGPU1\tmlx4_0\tCPU Affinity\nGPU0\t X \tSOC\tPHB\t0-5\nGPU1\tSOC\t X \tSOC\t6-11\nmlx4_0\tPHB\tSOC\t X\n").unwrap();
    assert_eq!(t.devices, vec!["GPU0", "GPU1", "mlx4_0"]);
    assert_eq!(t.link("GPU0", "GPU1"), Some("SYS"));
    assert_eq!(t.link("mlx4_0", "GPU0"), Some("PHB"));
    assert_eq!(t.legend, "old");
    assert_eq!(t.info["GPU1"].cpu_affinity.as_deref(), Some("6-11"));
}

#[test]
fn reports_corrupt_cells_and_keeps_the_rest() {
    let t = parse_str(
        "        GPU0    GPU1    GPU2\nGPU0     X      NV4     ?!x\nGPU1    NV4      X\n",
    )
    .unwrap();
    assert_eq!(t.link("GPU0", "GPU1"), Some("NV4"));
    assert!(
        t.problems
            .iter()
            .any(|p| p.contains("'?!x' is not a link code")),
        "{:?}",
        t.problems
    );
    assert!(
        t.problems
            .iter()
            .any(|p| p.contains("GPU1 has 2 of 3 link cells")),
        "{:?}",
        t.problems
    );
}

#[test]
fn refuses_text_without_a_matrix() {
    assert!(parse_str("hello\nworld\n").is_err());
}

#[test]
fn a_device_named_twice_is_refused_with_its_line() {
    let header =
        parse_str("\tGPU0\tGPU0\tCPU Affinity\nGPU0\t X \tPIX\t0-7\nGPU1\tPIX\t X \t0-7\n");
    let e = header.expect_err("two GPU0 columns");
    assert!(e.starts_with("line 1: the header names GPU0 twice"), "{e}");
    let rows = parse_str(
        "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tPIX\tPIX\nGPU1\tPIX\t X \tPIX\nGPU0\tPIX\tPIX\t X \n",
    );
    let e = rows.expect_err("two GPU0 rows");
    assert!(e.starts_with("line 4: a second row for GPU0"), "{e}");
    assert!(e.contains("(`GPU0 PIX PIX X`)"), "{e}");
    let spaced = parse_str("  GPU0  GPU1\nGPU0  X  NV2\nGPU0  NV2  X\n");
    assert!(spaced.is_err(), "{spaced:?}");
}

#[test]
fn run_together_header_labels_are_taken_from_the_rows_and_checked() {
    let rows = "GPU0\t X \tNV18\tNV18\tPXB\t0-47\t0\nGPU1\tNV18\t X \tNV18\tSYS\t0-47\t0\nGPU2\tNV18\tNV18\t X \tSYS\t48-95\t1\nmlx5_0\tPXB\tSYS\tSYS\t X \n";
    let t = parse_str(&format!(
        "\tGPU0GPU1GPU2mlx5_0\tCPU Affinity\tNUMA Affinity\n{rows}"
    ))
    .unwrap();
    assert_eq!(t.devices, vec!["GPU0", "GPU1", "GPU2", "mlx5_0"]);
    assert_eq!(t.link("GPU1", "GPU2"), Some("NV18"));
    assert_eq!(t.link("GPU0", "mlx5_0"), Some("PXB"));
    assert!(t.notes[0].contains("run together"), "{:?}", t.notes);
    // Without any separator or tab at all, the same.
    let t = parse_str(&format!(
        "GPU0GPU1GPU2mlx5_0CPU AffinityNUMA Affinity\n{rows}"
    ))
    .unwrap();
    assert_eq!(t.devices.len(), 4);
    // Rows only for the GPUs, NIC labels run together: the GPUs place themselves by
    // their X, the NIC columns take the header's labels, the affinities stay theirs.
    let gpus_only = "\tGPU0\tGPU1\tNIC0NIC1NIC2\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n\
        GPU0\t X \tNV18\tPIX\tSYS\tSYS\t0-47\t0\t\tN/A\n\
        GPU1\tNV18\t X \tSYS\tSYS\tPXB\t48-95\t1\t\tN/A\n";
    let t = parse_str(gpus_only).unwrap();
    assert_eq!(t.devices, vec!["GPU0", "GPU1", "NIC0", "NIC1", "NIC2"]);
    assert_eq!(t.link("GPU1", "NIC2"), Some("PXB"));
    assert_eq!(t.info["GPU1"].cpu_affinity.as_deref(), Some("48-95"));
    assert_eq!(t.info["GPU1"].numa_affinity.as_deref(), Some("1"));
    // A header that parses but names fewer columns than the rows hold: the diagonal
    // places them, and the labels that ran into the titles name the rest.
    let lost = "GPU0 GPU1 NIC0 NIC1NIC2CPU Affinity\n\
        GPU0  X  NV4 PIX SYS SYS 0-7\n\
        GPU1 NV4  X  SYS SYS PIX 8-15\n";
    let t = parse_str(lost).unwrap();
    assert_eq!(t.devices, vec!["GPU0", "GPU1", "NIC0", "NIC1", "NIC2"]);
    assert_eq!(t.link("GPU1", "NIC2"), Some("PIX"));
    assert_eq!(t.info["GPU1"].cpu_affinity.as_deref(), Some("8-15"));
    // A header that parses, but has lost two labels: the link cells are never read as
    // affinities; the columns it cannot name are refused.
    let short = "GPU0 GPU1 NIC0 CPU Affinity\n\
        GPU0  X  NV4 PIX SYS SYS 0-7\n\
        GPU1 NV4  X  SYS SYS PIX 8-15\n";
    assert!(parse_str(short).unwrap_err().contains("does not name it"));
    // A column with no row that the header does not name either is refused.
    let unnamed = "\tGPU0GPU1\nGPU0\t X \tNV4\tPIX\nGPU1\tNV4\t X \tSYS\n";
    assert!(parse_str(unnamed).unwrap_err().contains("does not name it"));
    // A matrix whose diagonal does not line up is refused, never printed wrong.
    let skewed = "\tGPU0GPU1\nGPU0\tNV4\t X \nGPU1\t X \tNV4\n";
    assert!(parse_str(skewed).unwrap_err().contains("line up"));
}
