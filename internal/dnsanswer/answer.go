// Package dnsanswer answers the agents' DNS queries on the gate's transparent address: every A
// query gets the gate's own address, every other query no address, and nothing is forwarded or
// resolved for an agent, so no name it asks for leaves the machine.
package dnsanswer

import (
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/net/dns/dnsmessage"
)

// TTL is the time to live of an answer, in seconds: the answer never changes while the gate
// keeps its address.
const TTL = 60

// Outcome is what one query asked and what it was answered, for its audit record.
type Outcome struct {
	// Name is the question's name as sent, without its final dot, with bytes outside printable
	// ASCII written \DDD; "" when the message had no question the answerer could read.
	Name string
	// Type is the question's type ("A", "AAAA", "HTTPS", "TYPE99"); "" with no question.
	Type string
	// RCode is the reply's response code ("NOERROR", "REFUSED", "NOTIMP", "FORMERR",
	// "SERVFAIL").
	RCode string
	// Addr is the address answered (an A query), or the zero Addr.
	Addr netip.Addr
}

// Answered reports whether the reply was NOERROR.
func (o Outcome) Answered() bool { return o.RCode == "NOERROR" }

// Status is how the answerer stands toward the query's source.
type Status uint8

const (
	// Known: [sources] names the source's container; its queries are answered.
	Known Status = iota
	// Unknown: no container; every query is REFUSED.
	Unknown
	// Failing: the gate cannot answer now (it cannot write its audit); SERVFAIL.
	Failing
)

// Answer builds the reply to the DNS message query from a source that stands as st: an A query
// (class IN) gets gate; AAAA, HTTPS, SVCB and every other type get no address (NODATA);
// ANY, AXFR, IXFR, another class or another opcode get NOTIMP; a message with more or fewer
// than one question FORMERR. It returns no reply for what must not be answered: a response, or
// a message too short to carry a header.
func Answer(query []byte, gate netip.Addr, st Status) (reply []byte, o Outcome) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil, o
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	q, qerr := p.Question()
	one := qerr == nil
	if one {
		o.Name, o.Type = shownName(q.Name), typeName(q.Type)
		if _, err := p.Question(); err != dnsmessage.ErrSectionDone {
			one = false
		}
	}
	var answer bool
	switch {
	case h.OpCode != 0:
		rh.RCode = dnsmessage.RCodeNotImplemented
	case !one:
		rh.RCode = dnsmessage.RCodeFormatError
	case st == Unknown:
		rh.RCode = dnsmessage.RCodeRefused
	case st == Failing:
		rh.RCode = dnsmessage.RCodeServerFailure
	case q.Class != dnsmessage.ClassINET:
		rh.RCode = dnsmessage.RCodeNotImplemented
	case q.Type == dnsmessage.TypeALL || q.Type == dnsmessage.TypeAXFR || q.Type == 251: // IXFR
		rh.RCode = dnsmessage.RCodeNotImplemented
	case q.Type == dnsmessage.TypeA && gate.Is4():
		answer = true
	}
	o.RCode = rcodeName(rh.RCode)
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), rh)
	b.EnableCompression()
	if one {
		if err := b.StartQuestions(); err != nil {
			return nil, o
		}
		if err := b.Question(q); err != nil {
			return nil, o
		}
	}
	if answer {
		if err := b.StartAnswers(); err != nil {
			return nil, o
		}
		if err := b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: TTL}, dnsmessage.AResource{A: gate.As4()}); err != nil {
			return nil, o
		}
		o.Addr = gate
	}
	out, err := b.Finish()
	if err != nil {
		return nil, o
	}
	return out, o
}

// shownName is a name for the record: without its final dot, with bytes outside printable ASCII
// (and the backslash) written \DDD.
func shownName(n dnsmessage.Name) string {
	data := n.Data[:n.Length]
	var b strings.Builder
	for i, c := range data {
		switch {
		case c == '.' && i == len(data)-1:
		case c > ' ' && c < 0x7f && c != '\\':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "\\%03d", c)
		}
	}
	return b.String()
}

var typeNames = map[dnsmessage.Type]string{
	dnsmessage.TypeA: "A", dnsmessage.TypeNS: "NS", dnsmessage.TypeCNAME: "CNAME", dnsmessage.TypeSOA: "SOA",
	dnsmessage.TypePTR: "PTR", dnsmessage.TypeMX: "MX", dnsmessage.TypeTXT: "TXT", dnsmessage.TypeAAAA: "AAAA",
	dnsmessage.TypeSRV: "SRV", dnsmessage.TypeOPT: "OPT", dnsmessage.TypeALL: "ANY", dnsmessage.TypeAXFR: "AXFR",
	251: "IXFR", 64: "SVCB", 65: "HTTPS", 257: "CAA",
}

func typeName(t dnsmessage.Type) string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("TYPE%d", uint16(t))
}

func rcodeName(c dnsmessage.RCode) string {
	switch c {
	case dnsmessage.RCodeSuccess:
		return "NOERROR"
	case dnsmessage.RCodeFormatError:
		return "FORMERR"
	case dnsmessage.RCodeServerFailure:
		return "SERVFAIL"
	case dnsmessage.RCodeNameError:
		return "NXDOMAIN"
	case dnsmessage.RCodeNotImplemented:
		return "NOTIMP"
	case dnsmessage.RCodeRefused:
		return "REFUSED"
	}
	return fmt.Sprintf("RCODE%d", c)
}
