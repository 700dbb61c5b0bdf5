// kube-apiserver, built from Kubernetes' own cmd/kube-apiserver/app package
// (as k8s.io/kubernetes/cmd/kube-apiserver/apiserver.go does).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	command := app.NewAPIServerCommand()
	os.Exit(cli.Run(command))
}
