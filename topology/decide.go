package topology

import "time"

// claim is one host's latest evidence of being primary.
type claim struct {
	index    int
	timeline uint32    // 0: unknown
	sentAt   time.Time // send time of the successful probe that saw it out of recovery
}

// decision is the outcome of the primary tracking rules.
type decision struct {
	primary   int // -1: none
	confirmed time.Time
	conflict  bool
}

// decide applies the primary tracking rules to the claims still inside the
// lease at now:
//   - none: no primary (a failover in progress);
//   - exactly one: it is the primary;
//   - several: the strictly highest timeline wins; a tie at the top or an
//     unknown timeline among them is a conflict, and there is no primary
//     (fail closed).
func decide(claims []claim, now time.Time, lease time.Duration) decision {
	d := decision{primary: -1}
	best, n := -1, 0
	tie, unknown := false, false
	for i, c := range claims {
		if now.Sub(c.sentAt) >= lease {
			continue
		}
		n++
		if c.timeline == 0 {
			unknown = true
		}
		switch {
		case best < 0 || c.timeline > claims[best].timeline:
			best, tie = i, false
		case c.timeline == claims[best].timeline:
			tie = true
		}
	}
	switch {
	case n == 0:
	case n == 1:
		d.primary, d.confirmed = claims[best].index, claims[best].sentAt
	case tie || unknown:
		d.conflict = true
	default:
		d.primary, d.confirmed = claims[best].index, claims[best].sentAt
	}
	return d
}

// decideProvider applies the rules of a provider's authority on top of the
// probes' claims at now: the primary is the host the provider's view
// authorises as leader (see [Authorize]), when that view is inside the
// lease (viewAt is when its request was sent; zero: no view yet) and the
// host's own probe found it out of recovery inside the lease too. It is
// confirmed at the older of the two. A conflict in the view means no
// primary. Claims of other hosts give nothing: the provider's consensus
// decides which host leads, the probes only whether it is writable.
func decideProvider(claims []claim, a *Authority, viewAt time.Time, now time.Time, lease time.Duration) decision {
	d := decision{primary: -1}
	if a == nil || viewAt.IsZero() || now.Sub(viewAt) >= lease {
		return d
	}
	if a.Conflict {
		d.conflict = true
		return d
	}
	if a.Leader < 0 {
		return d
	}
	for _, c := range claims {
		if c.index != a.Leader || now.Sub(c.sentAt) >= lease {
			continue
		}
		d.primary, d.confirmed = c.index, c.sentAt
		if viewAt.Before(d.confirmed) {
			d.confirmed = viewAt
		}
	}
	return d
}
