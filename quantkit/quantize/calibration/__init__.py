"""Calibration: bounded-memory, resumable range collection reproducing ONNX Runtime's calibrators (one phase of
quantization, as ORT's own calibrator phases: augment the graph, collect, compute).

Module map (the loop runs calibrate -> tap / reading -> the states)::

    calibrate         collect_ranges(): image by image, resumable; the states turned into ORT TensorsData by ..ort_bridge
    checkpoint        calibration state saved to / loaded from one .npz, keyed by everything it depends on
    tap               the tap model: every calibrated tensor (or its extremes, or its tails) as outputs of one session
    reading           folding one inference's tapped tensors into a calibration state (calibrate's inner loop)
    minmax            MinMaxState: ORT's MinMaxCalibrater, folded image by image
    histogram         HistogramState: exact two-pass histograms on ORT's bins (Distribution)
    fine_histogram    FineHistogramState: one-pass histograms within a stated tolerance (Percentile, Entropy)
    cutoffs           which elements a percentile tensor still needs read after its first image (cut-offs, piles)
    derive            ranges that follow exactly from another tensor's range (MinMax need not read them)

Nothing is imported here: ``import quantkit.quantize.calibration.checkpoint`` loads no ONNX Runtime.
"""
