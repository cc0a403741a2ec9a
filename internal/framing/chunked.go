package framing

import "github.com/lockhttp/lockhttp/internal/percent"

// Bounds of a chunked body's framing.
const (
	// MaxChunkLine bounds a chunk-size line, extensions and CRLF included; net/http's own reader
	// fails on longer ones.
	MaxChunkLine = 4096
	// MaxTrailer bounds the trailer section, final CRLF included.
	MaxTrailer = 64 << 10
	// maxSizeDigits bounds the hex digits of a chunk size (leading zeros count).
	maxSizeDigits = 15
	// maxName is the longest trailer name worth remembering: "transfer-encoding".
	maxName = 17
)

// Chunked finds the end of a chunked request body, strictly: chunk-size is 1 to 15 hex digits;
// chunk extensions follow a ';' and hold no CTL but HTAB; the chunk-size line ends in CRLF and is
// at most MaxChunkLine bytes; chunk data is followed by exactly CRLF; the last chunk has size 0;
// trailer field lines are checked like header lines (no obs-fold, a token name then ':' at once,
// a value of VCHAR, obs-text, SP and HTAB, and no Content-Length, Transfer-Encoding, Trailer or
// Host); the trailer section is at most MaxTrailer bytes; a final CRLF ends the body.
// The zero value is ready for a new body.
type Chunked struct {
	state   chunkState
	digits  uint8
	nlen    uint8  // bytes of the trailer name kept in name; maxName+1 once it is too long to matter
	size    uint64 // the chunk size being read, then the chunk data still to come
	line    int    // bytes of the current chunk-size line so far
	trailer int    // bytes of the trailer section so far
	name    [maxName]byte
	err     *Error
}

type chunkState uint8

const (
	csSize      chunkState = iota // in the hex digits of a chunk size
	csExt                         // in chunk extensions
	csSizeLF                      // after the CR that ends a chunk-size line
	csData                        // in chunk data
	csDataCR                      // after chunk data
	csDataLF                      // after the CR that follows chunk data
	csLineStart                   // at the start of a trailer field line or the final CRLF
	csName                        // in a trailer field name
	csValue                       // in a trailer field value
	csValueLF                     // after the CR that ends a trailer field line
	csFinalLF                     // after the CR of the final CRLF
	csDone                        // the body has ended
)

// Scan consumes the bytes of p that belong to the body: n of them. done reports that the body
// (including its trailer section and final CRLF) ended within p[:n]. On an error, p[:n] is the part
// of p that was still well formed, and every later call returns the same error. Scan gives the same
// result however a body is split across calls.
func (c *Chunked) Scan(p []byte) (n int, done bool, err *Error) {
	if c.err != nil {
		return 0, false, c.err
	}
	i := 0
	for i < len(p) {
		b := p[i]
		switch c.state {
		case csSize:
			switch {
			case classes[b]&cHex != 0:
				if c.digits == maxSizeDigits {
					return c.fail(i, bad("chunk size longer than %d hex digits", maxSizeDigits))
				}
				c.digits++
				v, _ := percent.Hex(b) // a hex digit: classes says so
				c.size = c.size<<4 | uint64(v)
			case b == ';' && c.digits > 0:
				c.state = csExt
			case b == '\r' && c.digits > 0:
				c.state = csSizeLF
			case b == '\n':
				return c.fail(i, bad("bare LF in a chunk-size line"))
			default:
				return c.fail(i, bad("invalid byte %s in a chunk size", quoteByte(b)))
			}
			c.line++ // at most maxSizeDigits+1: no need to check the bound here
		case csExt:
			switch {
			case b == '\r':
				c.state = csSizeLF
			case b == '\n':
				return c.fail(i, bad("bare LF in a chunk-size line"))
			case classes[b]&cValue == 0:
				return c.fail(i, bad("invalid byte %s in a chunk extension", quoteByte(b)))
			}
			if c.line++; c.line > MaxChunkLine-1 {
				return c.fail(i, bad("chunk-size line longer than %d bytes", MaxChunkLine))
			}
		case csSizeLF:
			if b != '\n' {
				return c.fail(i, bad("bare CR in a chunk-size line"))
			}
			c.line, c.digits = 0, 0
			if c.size == 0 {
				c.state = csLineStart
			} else {
				c.state = csData
			}
		case csData:
			k := uint64(len(p) - i)
			if k > c.size {
				k = c.size
			}
			c.size -= k
			i += int(k)
			if c.size == 0 {
				c.state = csDataCR
			}
			continue
		case csDataCR:
			if b != '\r' {
				return c.fail(i, bad("chunk data not followed by CRLF"))
			}
			c.state = csDataLF
		case csDataLF:
			if b != '\n' {
				return c.fail(i, bad("chunk data not followed by CRLF"))
			}
			c.state = csSize
		case csLineStart:
			switch {
			case b == '\r':
				c.state = csFinalLF
			case b == ' ' || b == '\t':
				return c.fail(i, bad("trailer line starts with whitespace (obs-fold is not allowed)"))
			case classes[b]&cToken != 0:
				c.state, c.nlen = csName, 0
				c.keep(b)
			default:
				return c.fail(i, bad("invalid byte %s at the start of a trailer line", quoteByte(b)))
			}
		case csName:
			switch {
			case classes[b]&cToken != 0:
				c.keep(b)
			case b == ':':
				if int(c.nlen) <= maxName && forbiddenTrailer(c.name[:c.nlen]) {
					return c.fail(i, bad("trailer field %s is not allowed", quoteName(c.name[:c.nlen])))
				}
				c.state = csValue
			case b == ' ' || b == '\t':
				return c.fail(i, bad("whitespace between a trailer name and its colon"))
			default:
				return c.fail(i, bad("invalid byte %s in a trailer name", quoteByte(b)))
			}
		case csValue:
			switch {
			case b == '\r':
				c.state = csValueLF
			case classes[b]&cValue == 0:
				return c.fail(i, bad("invalid byte %s in a trailer value", quoteByte(b)))
			}
		case csValueLF:
			if b != '\n' {
				return c.fail(i, bad("bare CR in a trailer line"))
			}
			c.state = csLineStart
		case csFinalLF:
			if b != '\n' {
				return c.fail(i, bad("bare CR after the trailer section"))
			}
			c.state = csDone
		case csDone:
			return i, true, nil
		}
		i++
		if c.state >= csLineStart {
			if c.trailer++; c.trailer > MaxTrailer {
				return c.fail(i-1, refuse(TooLarge, "trailer section larger than %d bytes", MaxTrailer))
			}
		}
	}
	return i, c.state == csDone, nil
}

func (c *Chunked) fail(i int, e *Error) (int, bool, *Error) {
	c.err = e
	return i, false, e
}

// keep remembers the lowercased start of a trailer name, enough to recognise forbidden fields.
func (c *Chunked) keep(b byte) {
	if int(c.nlen) < maxName {
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		c.name[c.nlen] = b
		c.nlen++
	} else {
		c.nlen = maxName + 1
	}
}
