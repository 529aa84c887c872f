package amqpdelay

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestPublishNackBeforeMultipleAck: the answer a publish gets is the broker's answer for its own
// delivery tag, when a basic.nack of a tag arrives while a lower tag is unconfirmed and a
// basic.ack with multiple=true then covers both. RabbitMQ sends that order (rabbit_channel's
// coalesce_and_send sends a confirm singly while a lower tag is outstanding, and as one
// multiple confirm once none is), and on 3.10.8 clusters it happened when a node was killed:
// publishes to quorum queues whose leader was on that node were nacked while others were acked.
// amqp091-go v1.16's NotifyPublish listener reports such a nacked tag as acked
// (confirms.Multiple confirms every tag up to the ack's with the ack's value and drops the nack
// it held for resequencing); its DeferredConfirmation of the tag keeps the nack. A Publisher that
// took the listener's Ack returned nil for a message the broker had refused: a confirmed message
// that was never stored.
//
// The broker is a scripted AMQP 0-9-1 peer over net.Pipe: handshake, channel.open,
// confirm.select, then, once three publishes (tags 1, 2, 3) have arrived, basic.nack of tag 2
// and basic.ack of tag 3 with multiple=true.
func TestPublishNackBeforeMultipleAck(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	srv := &scriptedBroker{rw: server, t: t}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.run(3) }()

	conn, err := amqp.Open(client, amqp.Config{SASL: []amqp.Authentication{&amqp.PlainAuth{Username: "u", Password: "p"}}})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer conn.Close()
	pc, err := openPubChan(conn, nil, false)
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// One at a time up to the write (sem), so the tags are 1, 2, 3 in the order of ids; the
	// confirms come only after all three are written.
	errs := make([]chan error, 3)
	for i := range errs {
		errs[i] = make(chan error, 1)
		go func() {
			errs[i] <- pc.publish(ctx, "x", "k", false, &amqp.Publishing{MessageId: fmt.Sprint("m", i+1), Body: []byte("x")}, 0, 0)
		}()
		// Wait until this publish has been written (its tag taken) before starting the next.
		for pc.ch.GetNextPublishSeqNo() != uint64(i+2) {
			if ctx.Err() != nil {
				t.Fatalf("publish %d not written", i+1)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i, want := range []error{nil, ErrNacked, nil} {
		got := <-errs[i]
		if (want == nil) != (got == nil) || (want != nil && !errors.Is(got, want)) {
			t.Errorf("publish with tag %d: err = %v, want %v", i+1, got, want)
		}
	}
	_ = conn.Close()
	if err := <-srvDone; err != nil {
		t.Errorf("scripted broker: %v", err)
	}
}

// scriptedBroker is the broker's side of TestPublishNackBeforeMultipleAck: just enough AMQP
// 0-9-1 (frames, methods by class and method id) for amqp091 to open a connection and a
// channel in confirm mode and publish.
type scriptedBroker struct {
	rw io.ReadWriter
	t  *testing.T
}

type amqpFrame struct {
	typ     byte
	channel uint16
	class   uint16 // method frames only
	method  uint16
}

func (b *scriptedBroker) read() (amqpFrame, error) {
	var hdr [7]byte
	if _, err := io.ReadFull(b.rw, hdr[:]); err != nil {
		return amqpFrame{}, err
	}
	payload := make([]byte, binary.BigEndian.Uint32(hdr[3:])+1) // + frame end
	if _, err := io.ReadFull(b.rw, payload); err != nil {
		return amqpFrame{}, err
	}
	f := amqpFrame{typ: hdr[0], channel: binary.BigEndian.Uint16(hdr[1:])}
	if f.typ == 1 && len(payload) >= 5 {
		f.class, f.method = binary.BigEndian.Uint16(payload), binary.BigEndian.Uint16(payload[2:])
	}
	return f, nil
}

// send writes a method frame; args are encoded big-endian (uint8/16/32/64, []byte as is).
func (b *scriptedBroker) send(channel, class, method uint16, args ...any) error {
	var p bytes.Buffer
	_ = binary.Write(&p, binary.BigEndian, class)
	_ = binary.Write(&p, binary.BigEndian, method)
	for _, a := range args {
		if bs, ok := a.([]byte); ok {
			p.Write(bs)
			continue
		}
		_ = binary.Write(&p, binary.BigEndian, a)
	}
	var f bytes.Buffer
	f.WriteByte(1)
	_ = binary.Write(&f, binary.BigEndian, channel)
	_ = binary.Write(&f, binary.BigEndian, uint32(p.Len()))
	f.Write(p.Bytes())
	f.WriteByte(0xCE)
	_, err := b.rw.Write(f.Bytes())
	return err
}

// expect reads frames until a method frame of class and method.
func (b *scriptedBroker) expect(class, method uint16) (amqpFrame, error) {
	for {
		f, err := b.read()
		if err != nil {
			return f, fmt.Errorf("waiting for method %d.%d: %w", class, method, err)
		}
		if f.typ == 1 && f.class == class && f.method == method {
			return f, nil
		}
		if f.typ == 1 {
			return f, fmt.Errorf("got method %d.%d, want %d.%d", f.class, f.method, class, method)
		}
	}
}

func longstr(s string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(s))), s...)
}

// run plays the script: handshake, channel 1 in confirm mode, publishes publishes, then nack
// tag 2 and ack tag publishes with multiple=true, then answers the client's closes.
func (b *scriptedBroker) run(publishes int) error {
	header := make([]byte, 8)
	if _, err := io.ReadFull(b.rw, header); err != nil || string(header) != "AMQP\x00\x00\x09\x01" {
		return fmt.Errorf("protocol header %q: %v", header, err)
	}
	steps := []func() error{
		// connection.start: 0-9, no server properties, PLAIN
		func() error {
			return b.send(0, 10, 10, uint8(0), uint8(9), uint32(0), longstr("PLAIN"), longstr("en_US"))
		},
		func() error { _, err := b.expect(10, 11); return err }, // start-ok
		// connection.tune: no channel limit, frame_max 131072, no heartbeats
		func() error { return b.send(0, 10, 30, uint16(0), uint32(131072), uint16(0)) },
		func() error { _, err := b.expect(10, 31); return err }, // tune-ok
		func() error { _, err := b.expect(10, 40); return err }, // connection.open
		func() error { return b.send(0, 10, 41, uint8(0)) },     // open-ok
		func() error { _, err := b.expect(20, 10); return err }, // channel.open
		func() error { return b.send(1, 20, 11, uint32(0)) },    // channel.open-ok
		func() error { _, err := b.expect(85, 10); return err }, // confirm.select
		func() error { return b.send(1, 85, 11) },               // confirm.select-ok
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	for seen := 0; seen < publishes; {
		f, err := b.read()
		if err != nil {
			return fmt.Errorf("after %d publishes: %w", seen, err)
		}
		if f.typ == 1 && f.class == 60 && f.method == 40 {
			seen++
		}
	}
	// basic.nack of tag 2 alone (multiple=false, requeue=false), then basic.ack of the last tag
	// with multiple=true: the order RabbitMQ sends while tag 1 is unconfirmed at the nack.
	if err := b.send(1, 60, 120, uint64(2), uint8(0)); err != nil {
		return err
	}
	if err := b.send(1, 60, 80, uint64(publishes), uint8(1)); err != nil {
		return err
	}
	for {
		f, err := b.read()
		if err != nil {
			return nil // the client closed the pipe
		}
		switch {
		case f.typ == 1 && f.class == 20 && f.method == 40: // channel.close
			if err := b.send(f.channel, 20, 41); err != nil {
				return nil
			}
		case f.typ == 1 && f.class == 10 && f.method == 50: // connection.close
			_ = b.send(0, 10, 51)
			return nil
		}
	}
}
