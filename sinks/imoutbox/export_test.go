package imoutbox

// FastPathOnly switches p's compensation scan off, for tests of the fast
// path alone (Config.DisableDelivery switches both off).
func FastPathOnly(p *Publisher) { p.scan = false }

// Settings is the configuration s runs with, defaults filled (tests).
func Settings(s *Service) ServiceConfig { return s.cfg }

// LockName is the scan fallback lock's name for a database and SDKAppID.
var LockName = lockName

// OpenChains is how many rooms p's fast path has a send chain open for.
func OpenChains(p *Publisher) int {
	p.fast.mu.Lock()
	defer p.fast.mu.Unlock()
	return len(p.fast.tails)
}

// QueuedPolls is how many polls p's fast path has not yet marked for
// commit.
func QueuedPolls(p *Publisher) int {
	p.fast.mu.Lock()
	defer p.fast.mu.Unlock()
	return len(p.fast.queue)
}
