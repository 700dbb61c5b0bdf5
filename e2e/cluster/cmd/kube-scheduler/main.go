// kube-scheduler, built from Kubernetes' own cmd/kube-scheduler/app package
// (as k8s.io/kubernetes/cmd/kube-scheduler/scheduler.go does).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	command := app.NewSchedulerCommand()
	os.Exit(cli.Run(command))
}
