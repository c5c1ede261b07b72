// Package live is what `roomflow loadgen` shows while it runs and reports
// when it ends: a progress line per second, the time series behind the
// report's charts, the commit → fact latency, and the report itself.
//
// The writer's counts go on a Counter: Add and Late per transaction.
// Start samples the Counter and the LagSources every
// Options.Interval and renders a Snapshot: on a terminal as a redrawn
// progress bar line (github.com/schollz/progressbar/v3; the terminal is
// told by github.com/mattn/go-isatty), otherwise as one log/slog line per
// tick. Settle waits, still sampling, for the pipeline to catch up after
// the writers; Stop returns the Recording, the rate and lags over time:
//
//	var c live.Counter
//	c.SetTarget(int64(rate * duration.Seconds())) // 0: open-ended, no ETA
//	c.SetRate(rate)                               // again as a ramp raises it
//	dlq := live.NewDLQCounter(dlqClient) // made with live.DLQConsumeOpts(time.Now(), dlqTopic)
//	defer dlq.Close()
//	p := live.Start(ctx, live.Options{Counter: &c, Sources: []live.LagSource{
//		dlq, // first: this run's dead letters (the metrics count since each process started)
//		live.MetricsSource{URLs: []string{"http://relay:9090/metrics", "http://process:9090/metrics", "http://sink:9090/metrics"}},
//		live.KafkaSource{Admin: adm, ProcessorGroups: []string{roomGroup, micGroup}, SinkGroups: []string{sinkGroup}},
//	}})
//	lat := live.NewFactLatency(db, appCode, live.LatencyOptions{PerSecond: 100})
//	go lat.Run(ctx, time.Second)
//	// per committed transaction: c.Add(len(rows)); c.Late(behind)
//	// per committed RoomMicChanged (not malformed): lat.Committed(eventID, commitTime)
//	_ = p.Settle(ctx, time.Minute) // the writers are done: sample until the pipeline caught up
//	rec := p.Stop()
//	_ = lat.Drain(ctx, 30*time.Second)
//	res := lat.Result()
//	s := live.Summary{Recording: rec, ByType: byType, Latency: &res, Verify: &live.Verify{Differences: n, Lines: lines}}
//	_ = live.WriteSummary(os.Stdout, s)
//	_ = live.WriteReport("run.md", s) // run.md, run-rate.svg, run-lag.svg
//
// A LagSource that fails leaves its values "n/a" for that tick (counted in
// Recording.SourceFailures, said in the report); nothing here stops the
// run. Memory is bounded by the run's length: a point per tick per series,
// and FactLatency's PerSecond samples per second of commits (pending
// events up to MaxPending). The package reads no roomflow config: the
// caller passes the endpoints, groups and topics.
package live
