// Package live is what `roomflow loadgen` shows while it runs and reports
// when it ends: a progress line per second, the time series behind the
// report's charts, the commit → fact latency, and the report itself.
//
// The writer counts what it commits on a Counter; Start samples it with the
// LagSources once per Options.Interval and renders a Snapshot: on a
// terminal as a progress bar line (github.com/schollz/progressbar/v3, the
// terminal decided by github.com/mattn/go-isatty), otherwise as a plain
// log/slog line. Stop returns the Recording (rate and lags over time):
//
//	var c live.Counter
//	c.SetTarget(int64(rate * duration.Seconds()))
//	c.SetRate(rate) // again as a ramp raises it
//	p := live.Start(ctx, live.Options{Counter: &c, Sources: []live.LagSource{
//		live.MetricsSource{URLs: []string{"http://relay:9090/metrics", "http://process:9090/metrics", "http://sink:9090/metrics"}},
//		live.KafkaSource{Admin: adm, ProcessorGroups: []string{roomGroup, micGroup}, SinkGroups: []string{sinkGroup}, DLQTopics: []string{dlqTopic}},
//	}})
//	lat := live.NewFactLatency(db, appCode, live.LatencyOptions{PerSecond: 200})
//	go lat.Run(ctx, time.Second)
//	// the writer, per committed transaction: c.Add(len(rows)); c.Late(behind);
//	// and per committed mic event: lat.Committed(eventID, commitTime)
//	rec := p.Stop()
//	_ = lat.Drain(ctx, 30*time.Second)
//	s := live.Summary{Recording: rec, ByType: byType, Latency: lat.Result(), Verify: &live.Verify{Differences: n, Lines: lines}}
//	_ = live.WriteSummary(os.Stdout, s)
//	_ = live.WriteReport("run.md", s) // run.md, run-rate.svg, run-lag.svg
//
// A LagSource that fails leaves its values "n/a" for that tick; nothing
// here stops the run. The package reads no roomflow config: the caller
// passes the endpoints, groups and topics.
package live
