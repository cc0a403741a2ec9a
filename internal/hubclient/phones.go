package hubclient

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"time"
)

// Phone is a paired phone as the hub's host lists it: the JSON of phone.Session, field for field
// (a phone.Session converts to and from it).
type Phone struct {
	ID         string    `json:"id"`
	Device     string    `json:"device"`
	Remote     string    `json:"remote"`
	LastRemote string    `json:"last_remote"`
	Created    time.Time `json:"created"`
	LastSeen   time.Time `json:"last_seen"`
	Sockets    int       `json:"sockets"`
}

// phoneID is the shape of a session id: "p" and 12 hex digits.
var phoneID = regexp.MustCompile(`^p[0-9a-f]{12}$`)

// CheckPhoneID refuses what cannot be a phone's id, with the fix.
func CheckPhoneID(id string) error {
	if !phoneID.MatchString(id) {
		return fmt.Errorf("%q is not a phone's id (p and 12 hex digits, as lox phones shows it)", id)
	}
	return nil
}

var errNoPhonePage = errors.New("the phone page is not enabled on this hub (console -phone-url): no phone can be paired")

// Phones lists the paired phones, oldest first.
func (f *Facade) Phones(ctx context.Context) ([]Phone, error) {
	var out []Phone
	err := f.c.call(ctx, "GET", "/v1/phones", nil, &out)
	var se *StatusError
	if errors.As(err, &se) && se.Status == 404 {
		return nil, errNoPhonePage
	}
	return out, err
}

// Unpair revokes the phone with session id at once; by names the person. It returns the phone
// that was revoked.
func (f *Facade) Unpair(ctx context.Context, id, by string) (Phone, error) {
	if err := CheckPhoneID(id); err != nil {
		return Phone{}, err
	}
	var out Phone
	err := f.c.call(ctx, "POST", "/v1/phones/"+url.PathEscape(id)+"/unpair", map[string]string{"by": by}, &out)
	var se *StatusError
	if errors.As(err, &se) && se.Status == 404 {
		if se.Msg == "" { // the route itself is missing
			return Phone{}, errNoPhonePage
		}
		return Phone{}, fmt.Errorf("%s: %s", id, se.Msg)
	}
	return out, err
}
