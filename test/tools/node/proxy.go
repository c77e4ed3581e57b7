package main

import (
	"io"
	"net"
)

// proxyLoopback forwards 127.0.0.1:port to the API server on the node address, so that
// the admin kubeconfig names a loopback address: with the cluster down, a client gets
// "connection refused" instead of sending its request along the default route to
// whatever answers for the bridge's subnet outside this machine.
func proxyLoopback(listen, target string) (io.Closer, error) {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer out.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
				go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return l, nil
}
